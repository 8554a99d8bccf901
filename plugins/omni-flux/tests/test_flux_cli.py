"""The installed ``omni`` command on FLUX: ``omni generate image`` writes the image ``Omni``
makes, bad options exit 2 before any weights load, ``omni list-plugins`` names the plugin with
its version."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest


def _omni(*commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Run ``omni ARGS...`` for each argument list, each in its own process (as a user runs
    it), all at once; their results in order."""
    from omni_core.testing.services import omni_command

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    running = [
        subprocess.Popen(
            omni_command(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for args in commands
    ]
    results = []
    for process in running:
        out, err = process.communicate(timeout=300)
        results.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return results


@pytest.fixture(scope="module")
def weightless(flux_checkpoints: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``weightless(variant)``: the checkpoint's configs and tokenizers without a weight file, so
    a command that got as far as loading weights would fail on them, not on the option."""
    root = tmp_path_factory.mktemp("flux-configs")

    def make(variant: str) -> Path:
        folder = root / variant
        if not folder.exists():
            shutil.copytree(
                flux_checkpoints[variant], folder, ignore=shutil.ignore_patterns("*.safetensors")
            )
        return folder

    return make


def test_generate_image_writes_the_image_omni_makes(
    flux_checkpoints, flux_models, tmp_path
) -> None:
    from PIL import Image

    out = tmp_path / "lighthouse.png"
    (result,) = _omni(
        [
            "generate",
            "image",
            str(flux_checkpoints["dev"]),
            "a lighthouse at dusk",
            "--size",
            "96x64",
            "--steps",
            "2",
            "--seed",
            "11",
            "--guidance",
            "4.0",
            "--extra",
            "max_sequence_length=32",
            "--dtype",
            "float32",
            "--device",
            "cpu",
            "-o",
            str(out),
        ]
    )
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in result.stdout + result.stderr
    expected = flux_models["dev"].generate(
        "a lighthouse at dusk",
        width=96,
        height=64,
        num_inference_steps=2,
        seed=11,
        guidance_scale=4.0,
        max_sequence_length=32,
    )
    written = np.asarray(Image.open(out).convert("RGB")).astype(int)
    assert written.shape == (64, 96, 3)
    assert np.abs(written - np.asarray(expected.images[0]).astype(int)).max() <= 1


BAD = [
    ("dev", ["--size", "100x64"], "multiples of 16"),
]


def test_bad_options_exit_2_before_loading(weightless: Any, tmp_path: Path) -> None:
    out = tmp_path / "x.png"
    results = _omni(
        *(
            ["generate", "image", str(weightless(variant)), "a cat", *args, "-o", str(out)]
            for variant, args, _ in BAD
        )
    )
    for (variant, args, message), result in zip(BAD, results, strict=True):
        assert result.returncode == 2, (variant, args, result.stderr)
        assert message in result.stderr, (variant, args, result.stderr)
        assert "Traceback" not in result.stderr
    assert not out.exists()


def test_list_plugins_names_omni_flux_with_its_version() -> None:
    import omni_flux

    (result,) = _omni(["list-plugins", "--json"])
    assert result.returncode == 0, result.stderr
    plugins = {p["name"]: p for p in json.loads(result.stdout)}
    flux = plugins["omni-flux"]
    assert flux["status"] == "ok"
    assert flux["distribution"] == "omni-flux"
    assert flux["version"] == omni_flux.__version__ == "0.1.0"
    assert set(flux["provides"]["pipelines"]) == {"flux", "flux-kontext", "flux2", "flux2-klein"}
    assert flux["provides"]["denoisers"] == ["flux-transformer", "flux2-transformer"]
