"""Loading a Wan checkpoint's components: diffusers' and transformers' own classes, as
``WanPipeline.from_pretrained`` loads them, each moved to the device the options name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from omni_core import InvalidRequestError, ModelNotFoundError, PipelineOptions
from omni_core.diffusion import dtype_kwargs, load_device
from omni_wan.layout import present


def load_components(path: Path, options: PipelineOptions) -> dict[str, Any]:
    """Every component ``model_index.json`` lists, by its name there (safetensors only).

    ``options.extra["vae_dtype"]`` sets the VAE's dtype (default float32, as diffusers' Wan
    examples run it); everything else uses ``options.dtype``.
    """
    import diffusers
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import AutoTokenizer, UMT5EncoderModel

    index = json.loads((path / "model_index.json").read_text())
    # On the host when offloaded (omni_core.diffusion.apply_offload places them after loading).
    device, dtype = load_device(options), options.dtype
    vae_dtype = parse_dtype(options.extra.get("vae_dtype"), torch.float32)
    components: dict[str, Any] = {}
    for name in ("transformer", "transformer_2"):
        if present(index, name):
            components[name] = (
                WanTransformer3DModel.from_pretrained(
                    path / name, **dtype_kwargs(dtype), use_safetensors=True
                )
                .to(device)
                .eval()
            )
    components["vae"] = (
        AutoencoderKLWan.from_pretrained(
            path / "vae", **dtype_kwargs(vae_dtype), use_safetensors=True
        )
        .to(device)
        .eval()
    )
    components["text_encoder"] = (
        UMT5EncoderModel.from_pretrained(path / "text_encoder", dtype=dtype, use_safetensors=True)
        .to(device)
        .eval()
    )
    components["tokenizer"] = AutoTokenizer.from_pretrained(path / "tokenizer")
    scheduler_name = json.loads((path / "scheduler" / "scheduler_config.json").read_text())[
        "_class_name"
    ]
    scheduler_cls = getattr(diffusers, scheduler_name, None)
    if scheduler_cls is None or not issubclass(scheduler_cls, diffusers.SchedulerMixin):
        raise ModelNotFoundError(f"{path}: unknown scheduler class {scheduler_name!r}")
    components["scheduler"] = scheduler_cls.from_pretrained(path / "scheduler")
    if present(index, "image_encoder"):
        # AutoImageProcessor picks the backend that is installed (the PIL one without
        # torchvision; importing CLIPImageProcessor by name then warns that it falls back).
        from transformers import AutoImageProcessor, CLIPVisionModel

        components["image_encoder"] = (
            CLIPVisionModel.from_pretrained(
                path / "image_encoder", dtype=dtype, use_safetensors=True
            )
            .to(device)
            .eval()
        )
        components["image_processor"] = AutoImageProcessor.from_pretrained(path / "image_processor")
    return components


def parse_dtype(value: Any, default: torch.dtype) -> torch.dtype:
    """A torch dtype from a name (``"bfloat16"``, ``"torch.float32"``) or a dtype."""
    if value is None:
        return default
    if isinstance(value, torch.dtype):
        return value
    result = getattr(torch, str(value).removeprefix("torch."), None)
    if not isinstance(result, torch.dtype):
        raise InvalidRequestError(f"unknown dtype {value!r}", param="vae_dtype")
    return result
