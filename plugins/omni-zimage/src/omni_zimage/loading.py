"""Z-Image's components loaded with diffusers' and transformers' own classes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omni_core import ConfigError, PipelineOptions
from omni_core.diffusion import dtype_kwargs, load_device


def load_components(path: Path, options: PipelineOptions) -> dict[str, Any]:
    """diffusers' and transformers' own classes, as ``ZImagePipeline.from_pretrained`` loads
    them (the text encoder's class from ``model_index.json``), safetensors only."""
    import json

    import transformers
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, ZImageTransformer2DModel

    scheduler = json.loads((path / "scheduler" / "scheduler_config.json").read_text())
    if scheduler.get("_class_name") != "FlowMatchEulerDiscreteScheduler" or scheduler.get(
        "stochastic_sampling"
    ):
        raise ConfigError(
            f"{path}: Z-Image needs a deterministic FlowMatchEulerDiscreteScheduler, found "
            f"{scheduler.get('_class_name')!r}"
        )
    index = json.loads((path / "model_index.json").read_text())
    library, name = index.get("text_encoder", ["transformers", "Qwen3Model"])
    encoder_class = getattr(transformers, name, None) if library == "transformers" else None
    if encoder_class is None:
        raise ConfigError(f"{path}: text_encoder {library}.{name} is not a transformers class")
    device, dtype = load_device(options), options.dtype
    encoder_device = options.extra.get("text_encoder_device") or device
    weights = {"use_safetensors": True}
    return {
        "transformer": ZImageTransformer2DModel.from_pretrained(
            path / "transformer", **dtype_kwargs(dtype), **weights
        )
        .to(device)
        .eval(),
        "vae": AutoencoderKL.from_pretrained(path / "vae", **dtype_kwargs(dtype), **weights)
        .to(device)
        .eval(),
        "text_encoder": encoder_class.from_pretrained(path / "text_encoder", dtype=dtype, **weights)
        .to(encoder_device)
        .eval(),
        "tokenizer": transformers.AutoTokenizer.from_pretrained(path / "tokenizer"),
        "scheduler": FlowMatchEulerDiscreteScheduler.from_pretrained(path / "scheduler"),
    }
