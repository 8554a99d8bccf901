"""Loading a HunyuanVideo-1.5 checkpoint: diffusers' and transformers' own classes, as
``HunyuanVideo15Pipeline.from_pretrained`` (and its image-to-video sibling) load them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omni_core import ConfigError, PipelineOptions
from omni_core.diffusion import dtype_kwargs, load_device


def load_components(path: Path, options: PipelineOptions) -> dict[str, Any]:
    """diffusers' and transformers' own classes, as ``HunyuanVideo15Pipeline.from_pretrained``
    loads them, safetensors only."""
    import json

    import transformers
    from diffusers import (
        AutoencoderKLHunyuanVideo15,
        FlowMatchEulerDiscreteScheduler,
        HunyuanVideo15Transformer3DModel,
    )

    scheduler = json.loads((path / "scheduler" / "scheduler_config.json").read_text())
    if scheduler.get("_class_name") != "FlowMatchEulerDiscreteScheduler" or scheduler.get(
        "stochastic_sampling"
    ):
        raise ConfigError(
            f"{path}: HunyuanVideo-1.5 needs a deterministic FlowMatchEulerDiscreteScheduler, "
            f"found {scheduler.get('_class_name')!r}"
        )
    index = json.loads((path / "model_index.json").read_text())

    def text_class(key: str, default: str) -> Any:
        library, name = index.get(key, ["transformers", default])
        found = getattr(transformers, name, None) if library == "transformers" else None
        if found is None:
            raise ConfigError(f"{path}: {key} {library}.{name} is not a transformers class")
        return found

    device, dtype = load_device(options), options.dtype
    encoder_device = options.extra.get("text_encoder_device") or device
    weights = {"use_safetensors": True}
    encoders = {
        key: text_class(key, default)
        .from_pretrained(path / key, dtype=dtype, **weights)
        .to(encoder_device)
        .eval()
        for key, default in (
            ("text_encoder", "Qwen2_5_VLTextModel"),
            ("text_encoder_2", "T5EncoderModel"),
        )
    }
    vision: dict[str, Any] = {}
    if "image_encoder" in index:  # the image-to-video layout's SigLIP encoder
        vision["image_encoder"] = (
            text_class("image_encoder", "SiglipVisionModel")
            .from_pretrained(path / "image_encoder", dtype=dtype, **weights)
            .to(device)
            .eval()
        )
        vision["feature_extractor"] = text_class(
            "feature_extractor", "SiglipImageProcessor"
        ).from_pretrained(path / "feature_extractor")
    return {
        **vision,
        "transformer": HunyuanVideo15Transformer3DModel.from_pretrained(
            path / "transformer", **dtype_kwargs(dtype), **weights
        )
        .to(device)
        .eval(),
        "vae": AutoencoderKLHunyuanVideo15.from_pretrained(
            path / "vae", **dtype_kwargs(dtype), **weights
        )
        .to(device)
        .eval(),
        **encoders,
        "tokenizer": transformers.AutoTokenizer.from_pretrained(path / "tokenizer"),
        "tokenizer_2": text_class("tokenizer_2", "ByT5Tokenizer").from_pretrained(
            path / "tokenizer_2"
        ),
        "scheduler": FlowMatchEulerDiscreteScheduler.from_pretrained(path / "scheduler"),
    }
