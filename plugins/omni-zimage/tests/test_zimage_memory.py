"""Z-Image with a LoRA adapter per request, offload and VAE tiling, each against diffusers' own
parts on the tiny checkpoint (the step caches: test_zimage_cache.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omni_core import Omni

KW = {"prompt": "a red cat on a mat", "height": 64, "width": 64, "num_inference_steps": 3}
TEXT = {"max_sequence_length": 64}
CFG = {"guidance_scale": 3.0, "negative_prompt": "blurry"}


def _pixels(image: Any) -> np.ndarray:
    return np.asarray(image).astype(np.int16)


def _reference_pipe(path: Path) -> Any:
    import diffusers

    pipe = diffusers.ZImagePipeline.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_a_lora_per_request_matches_diffusers(
    zimage_checkpoint, zimage_reference, tmp_path, worst_difference, reference_images
) -> None:
    import diffusers

    from omni_core.testing import build_tiny_lora

    model = diffusers.ZImageTransformer2DModel.from_pretrained(zimage_checkpoint / "transformer")
    file = build_tiny_lora(
        model,
        tmp_path / "style.safetensors",
        save=diffusers.ZImagePipeline.save_lora_weights,
        seed=1,
        std=0.3,
    )
    omni = Omni(zimage_checkpoint, device="cpu", dtype="float32", lora={"style": str(file)})
    ours = omni.generate(**KW, **TEXT, **CFG, seed=3, lora=[{"name": "style", "scale": 0.8}])
    pipe = _reference_pipe(zimage_checkpoint)
    pipe.load_lora_weights(str(file.parent), weight_name=file.name, adapter_name="style")
    pipe.set_adapters(["style"], adapter_weights=[0.8])
    reference = reference_images(pipe, 3, **KW, **TEXT, **CFG)
    assert worst_difference(ours.images, reference) <= 1
    base = omni.generate(**KW, **TEXT, **CFG, seed=3)  # no adapter named: the base model
    assert (
        worst_difference(base.images, reference_images(zimage_reference, 3, **KW, **TEXT, **CFG))
        <= 1
    )
    assert np.abs(_pixels(ours.images[0]) - _pixels(base.images[0])).max() > 8


@pytest.mark.parametrize("mode", ["model", "block"])
def test_offload_changes_no_number(mode, zimage_checkpoint, zimage_model) -> None:
    """On CPU host and device are one, so the hooks move no bytes: what is checked is that
    they are installed on every component and change no number."""
    omni = Omni(zimage_checkpoint, device="cpu", dtype="float32", offload=mode)
    report = omni.pipeline.offload
    assert report.mode == mode
    assert set(report.components) == {"transformer", "vae", "text_encoder"}
    ours = omni.generate(**KW, **TEXT, **CFG, seed=5).images[0]
    plain = zimage_model.generate(**KW, **TEXT, **CFG, seed=5).images[0]
    assert np.array_equal(_pixels(ours), _pixels(plain))


def test_vae_tiling_matches_diffusers_tiled_decode(
    zimage_checkpoint, zimage_model, worst_difference, reference_images
) -> None:
    args = {**KW, "height": 96, "width": 96, "guidance_scale": 0.0, **TEXT}
    omni = Omni(
        zimage_checkpoint,
        device="cpu",
        dtype="float32",
        offload={"vae_tiling": "on", "vae_tile": 64},
    )
    ours = omni.generate(**args, seed=6)
    assert ours.info["vae_tiled"] is True
    pipe = _reference_pipe(zimage_checkpoint)
    pipe.vae.enable_tiling()
    pipe.vae.tile_sample_min_size, pipe.vae.tile_latent_min_size = 64, 8
    assert worst_difference(ours.images, reference_images(pipe, 6, **args)) <= 1
    untiled = zimage_model.generate(**args, seed=6)
    assert untiled.info["vae_tiled"] is False
    assert np.abs(_pixels(ours.images[0]) - _pixels(untiled.images[0])).max() > 0
