"""LoRA adapters (both Wan2.2 experts), offload and VAE tiling against diffusers' own parts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from omni_core import Omni

SEED = 0


def _lora(checkpoint: Path, component: str, path: Path, seed: int) -> Path:
    from diffusers import WanPipeline, WanTransformer3DModel

    from omni_core.testing import build_tiny_lora

    model = WanTransformer3DModel.from_pretrained(checkpoint / component)
    return build_tiny_lora(model, path, save=WanPipeline.save_lora_weights, seed=seed, std=0.3)


def _reference(path: Path, kwargs: dict[str, Any], lora: Path, scale: float) -> np.ndarray:
    from diffusers import WanPipeline

    pipe = WanPipeline.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    # diffusers' own way to put one LoRA file into both Wan2.2 experts.
    pipe.load_lora_weights(str(lora.parent), weight_name=lora.name, adapter_name="a")
    pipe.load_lora_weights(
        str(lora.parent), weight_name=lora.name, adapter_name="a", load_into_transformer_2=True
    )
    pipe.set_adapters(["a"], adapter_weights=[scale])
    pipe.transformer_2.set_adapters(["a"], [scale])
    frames = pipe(
        **kwargs, output_type="np", generator=torch.Generator("cpu").manual_seed(SEED)
    ).frames[0]
    return (frames * 255).round().astype(np.uint8)


@pytest.fixture(scope="module")
def a14b(tiny_wan: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    path = tiny_wan("t2v-a14b")
    root = tmp_path_factory.mktemp("wan-lora")
    return {"path": path, "lora": _lora(path, "transformer", root / "a.safetensors", 1)}


def test_wan_a14b_lora_in_both_experts_matches_diffusers(a14b: dict[str, Path], wan_kwargs):
    kwargs = wan_kwargs("t2v-a14b", guidance_scale_2=2.5)
    omni = Omni(a14b["path"], lora={"a": str(a14b["lora"])})
    described = omni.pipeline.adapters.describe()["adapters"][0]
    assert described["components"] == ["transformer", "transformer_2"]
    ours = omni.generate(**kwargs, seed=SEED, lora=[{"name": "a", "scale": 0.8}]).video
    base = omni.generate(**kwargs, seed=SEED).video
    ref = _reference(a14b["path"], kwargs, a14b["lora"], 0.8)
    diff = np.abs(ours.astype(np.int16) - ref.astype(np.int16))
    assert diff.max() <= 1, f"max pixel difference {diff.max()} (> 1/255)"
    assert ref.std() > 1.0
    assert np.abs(ours.astype(np.int16) - base.astype(np.int16)).max() > 8, "LoRA had no effect"


def test_wan_model_offload_is_bit_identical(tiny_wan: Any, wan_kwargs) -> None:
    """On CPU the hooks move nothing (host == device), so what is checked is that they are
    installed on every component, run before each use, and change no number."""
    path = tiny_wan("ti2v")
    kwargs = {**wan_kwargs("ti2v"), "seed": SEED}
    plain = Omni(path).generate(**kwargs).video
    omni = Omni(path, offload="model")
    hooks = {h.name: h for h in omni.pipeline.offload.hooks}
    assert set(hooks) == {"transformer", "text_encoder", "vae"}
    video = omni.generate(**kwargs).video
    assert np.array_equal(video, plain)
    # the text encoder ran once per prompt branch, the transformer every step, the VAE once
    assert hooks["transformer"].onloads >= kwargs["num_inference_steps"]
    assert hooks["text_encoder"].onloads >= 1 and hooks["vae"].onloads >= 1


def test_wan_vae_tiling_matches_diffusers_tiled_and_is_close_to_untiled(
    tiny_wan: Any, wan_kwargs
) -> None:
    from diffusers import WanPipeline

    from omni_core.testing import vae_tiling_kwargs

    path = tiny_wan("t2v")
    kwargs = {**wan_kwargs("t2v"), "height": 64, "width": 96}
    plain = Omni(path).generate(**kwargs, seed=SEED).video.astype(np.int16)
    omni = Omni(path, offload={"vae_tiling": "on", "vae_tile": 64})
    tiled = omni.generate(**kwargs, seed=SEED).video.astype(np.int16)
    assert omni.pipeline.encoders.vae_memory.tiled_calls == 1
    pipe = WanPipeline.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    pipe.vae.enable_tiling(**vae_tiling_kwargs(64))
    generator = torch.Generator("cpu").manual_seed(SEED)
    ref = pipe(**kwargs, output_type="np", generator=generator).frames[0]
    ref = (ref * 255).round().astype(np.int16)
    assert np.abs(tiled - ref).max() <= 1, "tiled decode differs from diffusers' tiled decode"
    diff = np.abs(tiled - plain)
    assert diff.max() > 0, "tiling changed nothing: the tiles did not split the frame"
    # The stated tolerance of a tiled decode (64 px tiles, 16 px overlap) against the untiled
    # one on the tiny random-weight VAE: mean <= 6/255 (measured 4.2/255).
    assert diff.mean() <= 6.0, f"mean difference {diff.mean():.2f}/255"


def test_wan_a14b_block_offload_with_lora_is_bit_identical(a14b: dict[str, Path], wan_kwargs):
    """Both experts' blocks behind diffusers' group offloading (with the adapter loaded in
    each): the same video as without offload, the hooks on every block of both experts."""
    kwargs = {**wan_kwargs("t2v-a14b", guidance_scale_2=2.5), "seed": SEED, "lora": "a"}
    lora = {"a": str(a14b["lora"])}
    plain = Omni(a14b["path"], lora=lora).generate(**kwargs).video
    omni = Omni(a14b["path"], lora=lora, offload="block")
    for expert in omni.pipeline.transformers:
        assert all(b._diffusers_hook.get_hook("group_offloading") for b in expert.blocks)
    assert np.array_equal(omni.generate(**kwargs).video, plain)
