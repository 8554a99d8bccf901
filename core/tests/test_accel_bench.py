"""``omni bench pipeline``: the runner on the registered tiny workloads (CPU), through Omni(folder).

The tiny workloads are the model plugins' (``omni_wan.bench:TINY``, ``omni_qwen.bench:TINY``);
each mode loads the same checkpoint folder, so omni's lossless output must match the reference's
to within the pipelines' fidelity bound (1/255 per pixel in the plugins' own tests).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from omni_core import BenchmarkSpec, hookimpl
from omni_core.bench import (
    BenchOptions,
    Workload,
    run_benchmark,
    select_workloads,
    write_random_model,
)
from omni_core.bench.measure import PSNR_IDENTICAL, compare, psnr_fields
from omni_core.bench.runner import ensure_checkpoint, parse_modes
from omni_core.commands.bench import bench_pipeline
from omni_core.contract.errors import ConfigError
from omni_core.contract.host import PluginHost, get_registry

ROW_FIELDS = {
    "workload",
    "mode",
    "backend",
    "pipeline",
    "layers",
    "request",
    "checkpoint",
    "device",
    "dtype",
    "command",
    "lossy",
    "load_s",
    "first_request_s",
    "request_s",
    "request_s_all",
    "sec_per_step",
    "peak_memory_gib",
    "peak_memory_first_gib",
    "resident_memory_gib",
    "psnr_vs_diffusers_db",
    "speedup_vs_diffusers",
}


def _quiet(_message: str) -> None:
    pass


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    if not any(s.tiny for s in get_registry().benchmarks.values()):
        pytest.skip("no model plugin with tiny benchmark workloads is installed")
    root = tmp_path_factory.mktemp("bench")
    options = BenchOptions(
        out=root / "rows.json",
        work_dir=root / "work",
        modes=("diffusers", "omni"),
        reps=1,
        device="cpu",
        command="pytest tiny",
        log=_quiet,
    )
    return root, run_benchmark(tiny=True, options=options)


def test_tiny_workloads_rows(tiny_run: tuple[Path, list[dict[str, Any]]]) -> None:
    root, rows = tiny_run
    tiny = {name for name, s in get_registry().benchmarks.items() if s.tiny}
    assert {(r["workload"], r["mode"]) for r in rows} == {
        (name, mode) for name in tiny for mode in ("diffusers", "omni")
    }
    for row in rows:
        assert "error" not in row, row
        assert ROW_FIELDS <= set(row), ROW_FIELDS - set(row)
        assert row["load_s"] > 0 and row["first_request_s"] > 0 and row["request_s"] > 0
        assert len(row["request_s_all"]) == 1
        assert row["sec_per_step"] is not None and row["sec_per_step"] > 0
        # CPU: the platform cannot tell device memory, and the row says so.
        assert (
            row["peak_memory_gib"] is None
            and "reports no device memory" in (row["peak_memory_note"])
        )
        assert row["command"] == "pytest tiny" and row["device"].startswith("cpu")
        assert row["request"]["num_inference_steps"] == 2
    for row in rows:
        if row["mode"] == "omni":
            # Lossless: same checkpoint, same seed; the pipelines match diffusers within 1/255.
            assert row["psnr_vs_diffusers_db"] >= 40, row
            assert row["max_abs_diff_vs_diffusers"] <= 2, row
            assert row["loaded_pipeline"] == row["pipeline"]
            assert row["lossy"] is False and row["omni_timings"]["steps"] == 2
        else:
            assert row["output_std"] > 1.0, "a constant reference would make PSNR meaningless"
    data = json.loads((root / "rows.json").read_text())
    assert data["rows"] == json.loads(json.dumps(rows, default=str))
    assert data["command"] == "pytest tiny" and data["device"].startswith("cpu")
    assert {"python", "torch", "diffusers", "transformers", "omni-core"} <= set(data["versions"])
    assert (root / "rows.png").exists()


def test_checkpoint_folder_is_built_once(tiny_run: tuple[Path, list[dict[str, Any]]]) -> None:
    root, rows = tiny_run
    assert all(r["checkpoint"]["reused"] is False for r in rows)
    spec = next(s for s in get_registry().benchmarks.values() if s.tiny)
    again = ensure_checkpoint(spec.load(), root / "work")
    assert again["reused"] is True and Path(again["path"]).name == spec.load().key


# -- a third-party workload through the registry ------------------------------------------------

WORKLOAD_MODULE = '''
from dataclasses import dataclass
from omni_core.bench import Workload


@dataclass(frozen=True, kw_only=True)
class Flat(Workload):
    """A reference that paints one grey level; "build" writes a marker file."""

    level: int = 7

    def build_checkpoint(self, folder):
        (folder / "model_index.json").write_text("{}")
        (folder / "blocks.txt").write_text(str(self.blocks(12)))

    def request(self):
        return {"prompt": "x", "num_inference_steps": 3, "seed": 0}

    def load_reference(self, folder, device, dtype):
        return {"level": self.level, "blocks": int((folder / "blocks.txt").read_text())}

    def run_reference(self, reference, request, on_step=None):
        import numpy as np

        for _ in range(request["num_inference_steps"]):
            if on_step is not None:
                on_step()
        image = np.full((4, 4, 3), reference["level"], dtype=np.uint8)
        image[0, 0] = reference["blocks"]
        return {"images": [image]}


FLAT = Flat(name="flat-third-party", description="a test workload")
NOT_A_WORKLOAD = object()
'''


class ThirdParty:
    """A plugin object (not a module) that registers two benchmarks."""

    @hookimpl
    def omni_register_benchmarks(self, register: Any) -> None:
        register(
            BenchmarkSpec(
                name="flat-third-party",
                pipeline="flat",
                tiny=True,
                implementation="omni_third_party_bench:FLAT",
            )
        )
        register(
            BenchmarkSpec(
                name="broken-third-party",
                pipeline="flat",
                implementation="omni_third_party_bench:NOT_A_WORKLOAD",
            )
        )


@pytest.fixture
def third_party(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    (tmp_path / "omni_third_party_bench.py").write_text(textwrap.dedent(WORKLOAD_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    host = PluginHost(autoload=False)
    host.register_object("third-party", ThirdParty())
    return host.registry


def test_third_party_benchmark_is_selected(third_party: Any) -> None:
    assert "flat-third-party" in third_party.benchmarks
    ((spec, workload),) = select_workloads(third_party, tiny=True)
    assert spec.name == "flat-third-party" and spec.plugin == "third-party"
    assert isinstance(workload, Workload)
    ((spec, _),) = select_workloads(third_party, ["flat-third-party"])
    assert spec.pipeline == "flat"
    with pytest.raises(ConfigError, match=r"not an omni_core\.bench\.Workload"):
        select_workloads(third_party)  # the non-tiny one is broken
    with pytest.raises(ConfigError, match="registered: flat-third-party, broken-third-party"):
        select_workloads(third_party, ["nope"])


def test_third_party_workload_runs_through_the_runner(third_party: Any, tmp_path: Path) -> None:
    options = BenchOptions(
        out=tmp_path / "out.json",
        work_dir=tmp_path / "work",
        modes=("diffusers",),
        reps=2,
        layers=5,
        device="cpu",
        log=_quiet,
    )
    (row,) = run_benchmark(["flat-third-party"], options=options, registry=third_party)
    assert row["plugin"] == "third-party" and row["mode"] == "diffusers"
    assert row["layers"] is None  # a tiny workload is a fixed smoke test: --layers not applied
    assert len(row["request_s_all"]) == 2 and row["sec_per_step"] is not None
    assert row["output_shape"] == [1, 4, 4, 3]


def test_layers_change_the_checkpoint_key(third_party: Any, tmp_path: Path) -> None:
    workload = third_party.benchmarks["flat-third-party"].load()
    full = type(workload)(name="flat")
    assert full.key == "flat" and full.blocks(12) == 12
    reduced = full.with_layers(5)
    assert reduced.key == "flat-5layers" and reduced.layers == 5 and reduced.blocks(12) == 5
    info = ensure_checkpoint(reduced, tmp_path)
    assert (Path(info["path"]) / "blocks.txt").read_text() == "5" and info["layers"] == 5


# -- pieces ----------------------------------------------------------------------------------------


def test_compare_identical_and_perturbed() -> None:
    a = np.random.RandomState(0).randint(0, 256, (2, 8, 8, 3)).astype(np.uint8)
    assert compare(a, a) == {"psnr_db": PSNR_IDENTICAL, "max_abs_diff": 0, "mean_abs_diff": 0.0}
    b = a.copy()
    b[0, 0, 0, 0] ^= 1
    facts = compare(a, b)
    assert 40 < facts["psnr_db"] < PSNR_IDENTICAL and facts["max_abs_diff"] == 1
    assert "error" in compare(a, a[:1])


def test_constant_outputs_get_no_psnr() -> None:
    """A random checkpoint whose output overflowed decodes to one constant image in every mode:
    the rows must not read 100 dB (it was what the H200 Qwen-Image fp8 run first reported)."""
    blank = np.zeros((1, 8, 8, 3), dtype=np.uint8)
    fields = psnr_fields(blank, blank.copy(), "omni")
    assert fields["psnr_vs_omni_db"] is None
    assert "constant" in fields["compare_vs_omni_error"]
    image = np.arange(192, dtype=np.uint8).reshape(1, 8, 8, 3)
    assert psnr_fields(image, image.copy(), "omni")["psnr_vs_omni_db"] == PSNR_IDENTICAL
    assert psnr_fields(blank, image, "omni")["psnr_vs_omni_db"] < 30


def test_write_random_model_is_seeded_and_loadable(tmp_path: Path) -> None:
    import torch
    from diffusers import UNet2DModel

    config = {
        "sample_size": 8,
        "in_channels": 3,
        "out_channels": 3,
        "block_out_channels": (8, 16),
        "down_block_types": ("DownBlock2D", "DownBlock2D"),
        "up_block_types": ("UpBlock2D", "UpBlock2D"),
        "layers_per_block": 1,
        "norm_num_groups": 4,
    }
    n = write_random_model(UNet2DModel, config, tmp_path / "a", device="cpu", seed=3)
    write_random_model(UNet2DModel, config, tmp_path / "b", device="cpu", seed=3)
    from safetensors.torch import load_file

    weights = "diffusion_pytorch_model.safetensors"
    state, twin = load_file(tmp_path / "a" / weights), load_file(tmp_path / "b" / weights)
    loaded = UNet2DModel.from_pretrained(tmp_path / "a")  # the class's own loader accepts it
    assert (
        n == sum(p.numel() for p in loaded.parameters()) == sum(t.numel() for t in state.values())
    )
    for name, tensor in state.items():
        assert tensor.dtype == torch.bfloat16, name  # written in bf16: no fp32 copy on disk
        assert torch.equal(tensor, twin[name]), name  # seeded: the same bytes every time
    assert torch.all(state["conv_norm_out.weight"] == 1) and torch.all(state["conv_in.bias"] == 0)
    assert state["conv_in.weight"].float().std() > 0


def test_write_random_model_saves_persistent_buffers(tmp_path: Path) -> None:
    """A class that registers a persistent buffer (a VAE's latent mean) is written with the
    buffer's class default: built on meta, it had no data and ``save_pretrained`` failed."""
    import torch
    from diffusers import ModelMixin
    from diffusers.configuration_utils import ConfigMixin, register_to_config
    from safetensors.torch import load_file

    class Scaled(ModelMixin, ConfigMixin):
        @register_to_config
        def __init__(self, width: int = 4) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(width, width)
            self.register_buffer("latents_std", torch.full((width,), 2.0))
            self.register_buffer("table", torch.arange(width), persistent=False)

    n = write_random_model(Scaled, {"width": 4}, tmp_path / "m", device="cpu", seed=1)
    state = load_file(tmp_path / "m" / "diffusion_pytorch_model.safetensors")
    assert n == 20 and set(state) == {"proj.weight", "proj.bias", "latents_std"}
    assert torch.equal(state["latents_std"], torch.full((4,), 2.0))
    assert state["proj.weight"].dtype == torch.bfloat16 and state["proj.weight"].std() > 0


def test_modes_are_validated() -> None:
    assert parse_modes(["omni,diffusers", "omni-cache:teacache"]) == (
        "diffusers",
        "omni",
        "omni-cache:teacache",
    )
    with pytest.raises(ConfigError, match="unknown mode"):
        parse_modes(["turbo"])
    result = CliRunner().invoke(bench_pipeline, ["--tiny", "--modes", "turbo"])
    assert result.exit_code == 2 and "unknown mode" in result.output


def test_cli_lists_registered_workloads() -> None:
    result = CliRunner().invoke(bench_pipeline, ["--list"])
    assert result.exit_code == 0, result.output
    for name, spec in get_registry().benchmarks.items():
        assert name in result.output and (not spec.tiny or "(tiny)" in result.output)


def test_omni_fp8_without_fp8_attention_fails_before_any_mode(
    third_party: Any, tmp_path: Path
) -> None:
    """omni-fp8 is the fp8 mode (fp8 linears and fp8 attention): with no fp8 attention backend
    registered it is refused up front, not after the reference modes ran."""
    options = BenchOptions(
        out=tmp_path / "out.json",
        work_dir=tmp_path / "work",
        modes=("diffusers", "omni-fp8"),
        device="cpu",
        log=_quiet,
    )
    with pytest.raises(ConfigError, match="fp8: no fp8 attention backend is registered"):
        run_benchmark(["flat-third-party"], options=options, registry=third_party)
    assert not (tmp_path / "work").exists() and not (tmp_path / "out.json").exists()
