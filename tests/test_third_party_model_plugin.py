"""A third-party model plugin gets omni's whole acceleration and parallelism stack.

The plugin is made by ``omni new-plugin acme-dit --kind model``, built and installed with pip
into a temporary folder (a real wheel, entry point and all), and found by entry-point
discovery like any installed plugin. It reaches the core only through documented hooks
(``omni_register_pipelines``, ``omni_register_denoisers``) and ``import omni_core``; through
``Omni(...)`` it gets step batching, a step cache, fused QKV, regional compile, and
CFG-parallel / Ulysses on two CPU processes (gloo) that reproduce the single-process latents.
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("diffusers")

import numpy as np

from omni_core.cli import cli
from omni_core.contract.host import set_host
from omni_core.contract.platforms import reset_platform
from omni_core.testing import assert_imports_only_faces, assert_plugin_discoverable

DIST, MODULE, SPEC = "omni-acme-dit", "omni_acme_dit", "acme-dit"
#: 12 x 28 pixels, patch 4: 3 x 7 = 21 tokens (an uneven Ulysses split: 11 + 10).
REQUESTS = [
    {"prompt": "a red square on grey", "negative_prompt": "blurry", "seed": 1},
    {"prompt": "a blue circle", "seed": 2},
]
SHARED = {
    "height": 12,
    "width": 28,
    "num_inference_steps": 4,
    "guidance_scale": 3.0,
    "output_type": "latent",
}


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The generated plugin, pip-installed into a temp site dir that is on sys.path.

    Only this plugin (and the built-ins) load, here and in the parallel workers
    (``OMNI_LOAD_PLUGINS``; the workers are spawned with this process's sys.path).
    """
    root = tmp_path_factory.mktemp("third-party")
    result = CliRunner().invoke(cli, ["new-plugin", SPEC, "--kind", "model", "-o", str(root)])
    assert result.exit_code == 0, result.output
    package = root / DIST
    site = root / "site"
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--quiet",
            *isolation,
            "--target",
            str(site),
            str(package),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(site))
        mp.setenv("OMNI_LOAD_PLUGINS", DIST)
        mp.delenv("OMNI_DISABLE_PLUGIN_AUTOLOAD", raising=False)
        mp.delenv("OMNI_PLATFORM", raising=False)
        importlib.invalidate_caches()
        previous = set_host(None)  # the next get_host() discovers entry points afresh
        reset_platform()
        try:
            testing = importlib.import_module(f"{MODULE}.testing")
            checkpoint = testing.build_tiny_checkpoint(root / "checkpoint")
            yield {"package": package, "site": site, "checkpoint": checkpoint}
        finally:
            set_host(previous)
            reset_platform()
            for name in [m for m in sys.modules if m == MODULE or m.startswith(MODULE + ".")]:
                sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def reference(plugin: dict[str, Any]) -> list[np.ndarray]:
    """Each request alone, plain (no acceleration), in this process: the latents to match."""
    from omni_core import Omni

    omni = Omni(plugin["checkpoint"])
    return [omni.generate(**r, **SHARED).info["latents"] for r in REQUESTS]


def _record_steps(omni: Any) -> list[int]:
    """Wrap the loaded pipeline's step() to record how many states each call advanced."""
    sizes: list[int] = []
    step = omni.pipeline.step

    def recording(states: list[Any]) -> None:
        sizes.append(len(states))
        step(states)

    omni.pipeline.step = recording
    return sizes


def test_the_generated_plugin_is_discoverable_and_uses_only_the_public_sdk(
    plugin: dict[str, Any],
) -> None:
    registry = assert_plugin_discoverable(DIST)
    spec = registry.pipelines[SPEC]
    assert spec.plugin == DIST
    caps = spec.capabilities
    assert caps.step_batching and caps.cfg_parallel and caps.sequence_parallel
    assert "taylorseer" in caps.cache_backends
    denoiser = registry.denoiser_for("AcmeDitTransformer")
    assert denoiser is not None and denoiser.plugin == DIST
    # Every omni import of the package goes through omni-core's public faces.
    assert_imports_only_faces((plugin["package"] / "src").rglob("*.py"), test_kit=False)


def test_step_batching_fused_qkv_and_regional_compile_keep_the_result(
    plugin: dict[str, Any], reference: list[np.ndarray]
) -> None:
    from omni_core import Omni

    omni = Omni(plugin["checkpoint"], compile=True, compile_backend="aot_eager")
    sizes = _record_steps(omni)
    results = omni.generate_batch([{**r, **SHARED} for r in REQUESTS])
    # Step batching: both requests advanced together in every step() call.
    assert sizes == [2] * SHARED["num_inference_steps"]
    report = results[0].info["acceleration"]
    assert report["fused_qkv"] == {"transformer": 3}, report  # three blocks, one attention each
    assert [c["blocks"] for c in report["compile"]] == [3], report
    assert report["compile"][0]["block_class"] == "AcmeDitBlock"
    assert report["order"][:2] == ["fuse_qkv", "compile"], report
    assert not report["lossy"]
    assert results[0].info["attention"]["self"] == 3  # routed through omni's dispatcher
    for result, expected in zip(results, reference, strict=True):
        np.testing.assert_allclose(result.info["latents"], expected, atol=1e-5)


def test_a_step_cache_reports_hits(plugin: dict[str, Any], reference: list[np.ndarray]) -> None:
    from omni_core import Omni

    omni = Omni(
        plugin["checkpoint"],
        cache={"backend": "taylorseer", "options": {"cache_interval": 2, "warmup_steps": 1}},
    )
    results = omni.generate_batch([{**r, **SHARED} for r in REQUESTS])
    # The two requests shared every forward, so they shared one cache context: its counts are
    # reported once, with the request that finished first (cache_key / finish_request).
    stats = [r.info["step_cache"]["transformer"] for r in results]
    assert {s["backend"] for s in stats} == {"taylorseer"}
    assert sum(s["calls"] for s in stats) == SHARED["num_inference_steps"], stats
    assert sum(s["hits"] for s in stats) >= 1, stats
    assert all(r.info["acceleration"]["lossy"] for r in results)
    # Lossy, but an approximation of the same image, not another one.
    error = np.abs(results[0].info["latents"] - reference[0]).mean()
    assert 0 < error < 0.5 * np.abs(reference[0]).mean()


@pytest.mark.slow
def test_cfg_parallel_and_ulysses_on_two_processes_match_one_process(
    plugin: dict[str, Any], reference: list[np.ndarray]
) -> None:
    from omni_core import Omni

    for layout, shards in (({"cfg_parallel_size": 2}, None), ({"ulysses_degree": 2}, [[11, 10]])):
        with Omni(plugin["checkpoint"], **layout) as omni:
            assert omni.healthy
            sizes = _record_steps(omni)
            results = omni.generate_batch([{**r, **SHARED} for r in REQUESTS])
            assert sizes == [2] * SHARED["num_inference_steps"]  # batching across the group
        assert not omni.healthy, layout  # closed: the workers are gone
        for result, expected in zip(results, reference, strict=True):
            info = result.info["parallel"]
            assert info["world_size"] == 2, (layout, info)
            assert info.get("sequence_shards") == shards, (layout, info)
            np.testing.assert_allclose(
                result.info["latents"], expected, atol=1e-5, err_msg=str(layout)
            )
