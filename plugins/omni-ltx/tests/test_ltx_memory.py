"""LTX-2 with a LoRA adapter per request (against diffusers' load_lora_weights), offload,
VAE tiling (against diffusers' tiled decode) and fp8 linears in the transformer's blocks
(the step caches: test_ltx_cache.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

from omni_core import Omni

KW: dict[str, Any] = {"height": 32, "width": 32, "num_frames": 5, "num_inference_steps": 2}
PROMPT = "a red cat walks on the grass"


@pytest.fixture(scope="module")
def lora(ltx_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    import diffusers

    from omni_core.testing.lora import build_tiny_lora

    model = diffusers.LTX2VideoTransformer3DModel.from_pretrained(ltx_checkpoint / "transformer")
    root = tmp_path_factory.mktemp("ltx-lora")
    return build_tiny_lora(
        model, root / "a.safetensors", save=diffusers.LTX2Pipeline.save_lora_weights, std=0.3
    )


def test_lora_per_request_matches_diffusers(
    ltx_checkpoint, ltx_model, lora, reference, worst_difference, worst_audio
) -> None:
    import diffusers

    omni = Omni(ltx_checkpoint, device="cpu", dtype="float32", lora={"a": str(lora)})
    ours = omni.generate(PROMPT, seed=2, lora=[{"name": "a", "scale": 0.7}], **KW)
    pipe = diffusers.LTX2Pipeline.from_pretrained(ltx_checkpoint)
    pipe.set_progress_bar_config(disable=True)
    pipe.load_lora_weights(str(lora.parent), weight_name=lora.name, adapter_name="a")
    pipe.set_adapters(["a"], adapter_weights=[0.7])
    frames, sound = reference(pipe, 2, prompt=PROMPT, **KW)
    assert worst_difference(ours.video, frames) <= 1
    assert worst_audio(ours.audio, sound) <= 1e-4
    base = omni.generate(PROMPT, seed=2, **KW)  # no adapter named: the base model
    assert np.array_equal(base.video, ltx_model.generate(PROMPT, seed=2, **KW).video)
    assert np.abs(base.video.astype(int) - ours.video.astype(int)).max() > 10


def test_offload_changes_no_number(ltx_checkpoint, ltx_model) -> None:
    """On CPU host and device are one, so the hooks move no bytes: what is checked is that
    they are installed on every component and change no number."""
    omni = Omni(ltx_checkpoint, device="cpu", dtype="float32", offload="model")
    report = omni.pipeline.offload
    assert report.mode == "model"
    assert set(report.components) == {
        "transformer", "vae", "audio_vae", "vocoder", "text_encoder", "connectors",
    }  # fmt: skip
    ours = omni.generate(PROMPT, seed=5, **KW)
    plain = ltx_model.generate(PROMPT, seed=5, **KW)
    assert np.array_equal(ours.video, plain.video) and np.array_equal(ours.audio, plain.audio)


def test_vae_tiling_matches_diffusers_tiled_decode(
    ltx_checkpoint, ltx_model, reference, worst_difference
) -> None:
    args = {**KW, "height": 64, "width": 64}
    omni = Omni(
        ltx_checkpoint, device="cpu", dtype="float32", offload={"vae_tiling": "on", "vae_tile": 32}
    )
    ours = omni.generate(PROMPT, seed=6, **args)
    assert ours.info["vae_tiled"] is True
    import diffusers

    pipe = diffusers.LTX2Pipeline.from_pretrained(ltx_checkpoint)
    pipe.set_progress_bar_config(disable=True)
    pipe.vae.enable_tiling(
        tile_sample_min_height=32,
        tile_sample_min_width=32,
        tile_sample_stride_height=28,
        tile_sample_stride_width=28,
    )
    frames, _ = reference(pipe, 6, prompt=PROMPT, **args)
    assert worst_difference(ours.video, frames) <= 1
    untiled = ltx_model.generate(PROMPT, seed=6, **args)  # auto: the CPU cannot tell, no tiling
    assert untiled.info["vae_tiled"] is False
    assert np.abs(untiled.video.astype(int) - ours.video.astype(int)).max() > 0
    platform = type(ltx_model.options.platform)
    with mock.patch.object(platform, "free_memory_bytes", return_value=1024):
        assert ltx_model.generate(PROMPT, seed=6, **args).info["vae_tiled"] is True


def test_fp8_linears_in_the_blocks_stay_close(ltx_checkpoint, ltx_model) -> None:
    omni = Omni(ltx_checkpoint, device="cpu", dtype="float32", quantization="fp8")
    (report,) = omni.pipeline.accel.quantization
    assert report.linears > 0 and report.bytes_after < report.bytes_before
    ours = omni.generate(PROMPT, seed=7, **KW)
    plain = ltx_model.generate(PROMPT, seed=7, **KW)
    assert ours.info["acceleration"]["lossy"] is True
    diff = np.abs(ours.video.astype(int) - plain.video.astype(int))
    assert 0 < diff.mean() < 40, diff.mean()
    assert np.abs(ours.audio - plain.audio).mean() < 0.05
