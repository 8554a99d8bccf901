"""Loading a Qwen-Image checkpoint's components: diffusers' and transformers' own classes, as
diffusers' Qwen-Image pipelines load them, safetensors only, each on the device it runs on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omni_core import ConfigError, PipelineOptions
from omni_core.diffusion import load_device
from omni_qwen.layout import QwenLayout


def load_components(
    path: Path, layout: QwenLayout, options: PipelineOptions, *, processor: bool
) -> dict[str, Any]:
    """transformer, vae, text_encoder, tokenizer, scheduler (and the VL ``processor`` the edit
    pipelines need). ``options.extra["text_encoder_device"]`` may put the text encoder
    elsewhere (e.g. ``"cpu"``) to leave the GPU to the denoiser. Components to be offloaded
    (``options.memory.offload``) load on the host; ``omni_core.diffusion.apply_offload`` places
    them."""
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImageTransformer2DModel,
    )
    from transformers import Qwen2_5_VLForConditionalGeneration, Qwen2Tokenizer

    if layout.guidance_embeds:
        raise ConfigError(f"{path}: guidance-distilled Qwen-Image transformers are not supported")
    device, dtype = load_device(options), options.dtype
    encoder_device = options.extra.get("text_encoder_device") or device
    scheduler_cfg = json.loads((path / "scheduler" / "scheduler_config.json").read_text())
    if scheduler_cfg.get("_class_name") != "FlowMatchEulerDiscreteScheduler" or (
        scheduler_cfg.get("stochastic_sampling")
    ):
        raise ConfigError(
            f"{path}: Qwen-Image pipelines need a deterministic "
            f"FlowMatchEulerDiscreteScheduler, found {scheduler_cfg.get('_class_name')!r}"
        )
    components: dict[str, Any] = {
        "transformer": QwenImageTransformer2DModel.from_pretrained(
            path / "transformer", torch_dtype=dtype, use_safetensors=True
        )
        .to(device)
        .eval(),
        "vae": AutoencoderKLQwenImage.from_pretrained(
            path / "vae", torch_dtype=dtype, use_safetensors=True
        )
        .to(device)
        .eval(),
        "text_encoder": Qwen2_5_VLForConditionalGeneration.from_pretrained(
            path / "text_encoder", dtype=dtype, use_safetensors=True
        )
        .to(encoder_device)
        .eval(),
        "tokenizer": Qwen2Tokenizer.from_pretrained(path / "tokenizer"),
        "scheduler": FlowMatchEulerDiscreteScheduler.from_pretrained(path / "scheduler"),
    }
    if processor:
        from omni_qwen.compat import load_vl_processor

        components["processor"] = load_vl_processor(path / "processor")
    return components
