"""FLUX.1 with LoRA adapters (per request, two at once, a fused distill), offload, VAE tiling
and the step caches, each against diffusers' own parts on the tiny checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch

from omni_core import InvalidRequestError, Omni

KW = {"prompt": "a red cat on a mat", "height": 64, "width": 64, "num_inference_steps": 3}
T5 = {"max_sequence_length": 32}
CFG = {"negative_prompt": "blurry", "true_cfg_scale": 3.0}


def _pixels(image: Any) -> np.ndarray:
    return np.asarray(image).astype(np.int16)


@pytest.fixture(scope="module")
def loras(flux_checkpoints: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    import diffusers

    from omni_core.testing.lora import build_tiny_lora

    root = tmp_path_factory.mktemp("flux-lora")
    path = flux_checkpoints["dev"]
    out: dict[str, Path] = {}
    for seed, name in enumerate(("a", "b", "distill"), start=1):
        model = diffusers.FluxTransformer2DModel.from_pretrained(path / "transformer")
        meta = {"omni.num_inference_steps": "2", "omni.guidance_scale": "2.0"}
        out[name] = build_tiny_lora(
            model,
            root / f"{name}.safetensors",
            save=diffusers.FluxPipeline.save_lora_weights,
            seed=seed,
            std=0.3,
            metadata=meta if name == "distill" else None,
        )
    return out


def _reference(path: Path, adapters: dict[str, tuple[Path, float]], seed: int, **kw: Any) -> Any:
    import diffusers

    pipe = diffusers.FluxPipeline.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    for name, (file, _) in adapters.items():
        pipe.load_lora_weights(str(file.parent), weight_name=file.name, adapter_name=name)
    if adapters:
        pipe.set_adapters(list(adapters), adapter_weights=[s for _, s in adapters.values()])
    return pipe(**kw, generator=torch.Generator("cpu").manual_seed(seed)).images[0]


def test_two_adapters_with_true_cfg_match_diffusers(
    flux_checkpoints, flux_references, loras, run_reference, assert_same
) -> None:
    path = flux_checkpoints["dev"]
    omni = Omni(path, lora={"a": str(loras["a"]), "b": {"path": str(loras["b"]), "scale": 0.5}})
    lora = [{"name": "a", "scale": 0.7}, {"name": "b"}]  # b at its loaded scale, 0.5
    ours = omni.generate(**KW, **T5, **CFG, seed=3, lora=lora).images[0]
    ref = _reference(path, {"a": (loras["a"], 0.7), "b": (loras["b"], 0.5)}, 3, **KW, **T5, **CFG)
    assert_same([ours], [ref])
    base = omni.generate(**KW, **T5, **CFG, seed=3).images[0]  # adapters off: the base model
    assert_same([base], run_reference(flux_references["dev"], 3, **KW, **T5, **CFG))
    assert np.abs(_pixels(ours) - _pixels(base)).max() > 8
    assert omni.pipeline.accel.fused_qkv == {}  # QKV fusion would bypass the adapters


def test_fused_distill_matches_diffusers_fuse_lora_and_sets_defaults(
    flux_checkpoints, loras, assert_same
) -> None:
    import diffusers

    path = flux_checkpoints["dev"]
    omni = Omni(path, lora={"distill": str(loras["distill"])}, fuse_lora="distill")
    assert omni.pipeline.adapters.request_defaults() == {
        "num_inference_steps": 2,
        "guidance_scale": 2.0,
    }
    request = omni.request("a red cat", height=64, width=64, seed=2, **T5)
    assert request.num_inference_steps == 2 and request.guidance_scale == 2.0
    (ours,) = omni.run([request])
    assert omni.pipeline.accel.fused_qkv == {"transformer": 3}  # merged weights: fusion is safe
    pipe = diffusers.FluxPipeline.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    file = loras["distill"]
    pipe.load_lora_weights(str(file.parent), weight_name=file.name, adapter_name="distill")
    pipe.fuse_lora(lora_scale=1.0, adapter_names=["distill"])
    pipe.unload_lora_weights()
    ref = pipe(
        prompt="a red cat",
        height=64,
        width=64,
        num_inference_steps=2,
        guidance_scale=2.0,
        generator=torch.Generator("cpu").manual_seed(2),
        **T5,
    ).images[0]
    assert_same(ours.images, [ref])
    with pytest.raises(InvalidRequestError, match="fused into the weights"):
        omni.request("x", lora="distill")


@pytest.mark.parametrize("mode", ["model", "block"])
def test_offload_changes_no_number(mode, flux_checkpoints, flux_models) -> None:
    """On CPU host and device are one, so the hooks move no bytes: what is checked is that
    they are installed on every component and change no number."""
    omni = Omni(flux_checkpoints["dev"], offload=mode)
    report = omni.pipeline.offload
    assert report.mode == mode
    assert set(report.components) == {"transformer", "vae", "text_encoder", "text_encoder_2"}
    if mode == "block":
        assert report.components["transformer"].startswith("block")
    ours = omni.generate(**KW, **T5, **CFG, seed=5).images[0]
    plain = flux_models["dev"].generate(**KW, **T5, **CFG, seed=5).images[0]
    assert np.array_equal(_pixels(ours), _pixels(plain))


def test_vae_tiling_matches_diffusers_tiled_decode(
    flux_checkpoints, flux_models, assert_same
) -> None:
    """vae_tiling=on tiles the decode as diffusers' AutoencoderKL.enable_tiling does; vae_tile
    sets the tile size, as the attributes diffusers reads (tile_sample_min_size and its latent
    size); auto tiles when the platform says the decode would not fit."""
    import diffusers

    path = flux_checkpoints["dev"]
    args = {**KW, "height": 96, "width": 96, **T5}
    omni = Omni(path, offload={"vae_tiling": "on", "vae_tile": 64})
    ours = omni.generate(**args, seed=6)
    assert ours.info["vae_tiled"] is True
    pipe = diffusers.FluxPipeline.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    pipe.vae.enable_tiling()
    pipe.vae.tile_sample_min_size, pipe.vae.tile_latent_min_size = 64, 8
    ref = pipe(**args, generator=torch.Generator("cpu").manual_seed(6)).images[0]
    assert_same(ours.images, [ref])
    plain = flux_models["dev"]  # vae_tiling auto: the CPU platform cannot tell, so no tiling
    untiled = plain.generate(**args, seed=6)
    assert untiled.info["vae_tiled"] is False
    assert np.abs(_pixels(ours.images[0]) - _pixels(untiled.images[0])).max() > 0
    platform = type(plain.options.platform)
    with mock.patch.object(platform, "free_memory_bytes", return_value=1024):
        assert plain.generate(**args, seed=6).info["vae_tiled"] is True


@pytest.mark.parametrize("backend", ["teacache", "magcache", "first-block"])
def test_step_caches_skip_steps_across_both_block_lists(flux_checkpoints, backend) -> None:
    options = {
        "teacache": {"threshold": 10.0},
        "magcache": {"threshold": 1.0, "num_inference_steps": 6},  # FLUX's ratios, resampled
        "first-block": {"threshold": 10.0},
    }[backend]
    omni = Omni(flux_checkpoints["dev"], cache={"backend": backend, "options": options})
    result = omni.generate(**{**KW, "num_inference_steps": 6}, **T5, seed=1)
    stats = result.info["step_cache"]["transformer"]
    assert stats["backend"] == backend and stats["calls"] == 6
    assert stats["hits"] > 0, stats
    assert np.asarray(result.images[0]).std() > 5
    if backend == "teacache":
        options = omni.pipeline.accel.as_dict()["cache"]["transformer"]["options"]
        assert options["coefficients_source"] == "TeaCache4FLUX (FLUX.1-dev)"
