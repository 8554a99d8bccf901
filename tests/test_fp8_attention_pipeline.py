"""fp8 attention through a real pipeline: omni-attention-fp8's backends on omni-zimage's tiny
checkpoint, selected per role and by the fp8 mode, with the image's PSNR against SDPA.

The PSNR bound is loose on purpose: the tiny model has random weights (its attention is not
trained to be peaked, so fp8's relative error is at its worst) and 3 steps. The test asserts
that fp8 ran (the image differs) and that it stays an image of the same content.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omni_core import Omni
from omni_core.testing import isolated_host, run_cli

SMALL: dict[str, Any] = {"height": 64, "width": 64, "num_inference_steps": 3, "seed": 7}
PROMPT = "a red cat on a blue sofa"
#: Below this the fp8 image is not the same picture any more; above 60 dB it is not fp8.
MIN_PSNR_DB, MAX_PSNR_DB = 20.0, 60.0


@pytest.fixture(scope="module")
def zimage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_zimage.testing import build_tiny_zimage

    return build_tiny_zimage(tmp_path_factory.mktemp("fp8-zimage") / "tiny")


@pytest.fixture(scope="module")
def sdpa_image(zimage: Path) -> np.ndarray:
    with Omni(zimage, device="cpu", dtype="float32", attention="sdpa") as omni:
        return np.asarray(omni.generate(PROMPT, **SMALL).images[0], dtype=np.float64)


def _psnr(reference: np.ndarray, image: np.ndarray) -> float:
    mse = float(np.mean((reference - image) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def test_fp8_on_the_self_role_only(zimage: Path, sdpa_image: np.ndarray, record_property) -> None:
    with Omni(zimage, device="cpu", dtype="float32", attention={"self": "fp8-emulated"}) as omni:
        assert omni.options.attention.names == {
            "self": "fp8-emulated",
            "cross": "sdpa",
            "joint": "sdpa",
        }
        image = np.asarray(omni.generate(PROMPT, **SMALL).images[0], dtype=np.float64)
    psnr = _psnr(sdpa_image, image)
    record_property("psnr_vs_sdpa_db", round(psnr, 2))
    print(f"fp8-emulated on self: PSNR {psnr:.2f} dB against sdpa")
    assert MIN_PSNR_DB <= psnr <= MAX_PSNR_DB, psnr


def test_fp8_mode_is_fp8_linears_and_fp8_attention_on_heavy_roles(
    zimage: Path, sdpa_image: np.ndarray, record_property
) -> None:
    with Omni(zimage, device="cpu", dtype="float32", attention="sdpa", fp8=True) as omni:
        assert omni.options.quantization.method == "fp8"
        assert omni.options.attention.names == {
            "self": "fp8-emulated",  # heavy roles (the default: self, joint)
            "cross": "sdpa",
            "joint": "fp8-emulated",
        }
        result = omni.generate(PROMPT, **SMALL)
        image = np.asarray(result.images[0], dtype=np.float64)
    psnr = _psnr(sdpa_image, image)
    record_property("psnr_vs_bf16_db", round(psnr, 2))
    print(f"fp8 mode (fp8 linears + fp8-emulated attention): PSNR {psnr:.2f} dB against sdpa")
    assert MIN_PSNR_DB <= psnr <= MAX_PSNR_DB, psnr


def test_cli_refuses_fp8_cudnn_on_cpu_in_one_line(zimage: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.png"
    args = ("generate", "image", str(zimage), PROMPT, "-o", str(out), "--device", "cpu")
    result = run_cli(*args, "--attention-backend", "fp8-cudnn")
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert "attention.backend: 'fp8-cudnn' cannot run on platform 'cpu'" in lines[0]
    assert not out.exists()


def test_cli_fp8_without_an_fp8_backend_says_so(zimage: Path, tmp_path: Path) -> None:
    with isolated_host() as host:
        host.load_module("omni-zimage", "omni_zimage.plugin")
        out = tmp_path / "x.png"
        result = run_cli("generate", "image", str(zimage), PROMPT, "-o", str(out), "--fp8")
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "fp8: no fp8 attention backend is registered" in lines[0]
    assert not out.exists()


def test_the_kernel_benchmark_runs_on_cpu(tmp_path: Path) -> None:
    """bench/fp8_attention_kernel.py (run on an H200 by hand) keeps working: its --cpu --tiny
    form times SDPA and fp8-emulated, reports their error, and says why fp8-cudnn cannot run."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "kernel.json"
    args = ["--cpu", "--tiny", "--reps", "1", "--warmup", "0", "--out", str(out)]
    script = str(root / "bench" / "fp8_attention_kernel.py")
    done = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    rows = {(r["shape"], r["batch"], r["mode"]): r for r in result["rows"]}
    assert result["meta"]["command"].startswith("python3 bench/fp8_attention_kernel.py --cpu")
    for shape, batch in (("tiny-self", 1), ("tiny-self", 2), ("tiny-joint-padded", 2)):
        exact, fp8 = rows[(shape, batch, "sdpa")], rows[(shape, batch, "fp8-emulated")]
        assert exact["rel_rms_err_vs_fp32"] < 1e-4 < fp8["rel_rms_err_vs_fp32"] < 0.1
        assert fp8["ms"] > 0 and fp8["tflop_per_call"] >= 0
        assert rows[(shape, batch, "fp8-cudnn")]["error"].startswith("runs on CUDA only")
