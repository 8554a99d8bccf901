"""Loading an LTX-2 checkpoint: diffusers' and transformers' own classes, as
``LTX2Pipeline.from_pretrained`` (and its image-to-video sibling) load them, safetensors only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omni_core import ConfigError, PipelineOptions
from omni_core.diffusion import dtype_kwargs, load_device

#: The components this plugin loads, and the classes model_index.json may name for them.
TEXT_ENCODERS = ("Gemma3ForConditionalGeneration",)
VOCODERS = ("LTX2Vocoder", "LTX2VocoderWithBWE")


def _named(index: dict[str, Any], key: str, allowed: tuple[str, ...], path: Path) -> str:
    entry = index.get(key)
    name = entry[1] if isinstance(entry, list) and len(entry) == 2 else None
    if name not in allowed:
        raise ConfigError(f"{path}: {key} is {entry!r}; omni-ltx loads {' or '.join(allowed)}")
    return name  # type: ignore[return-value]


def load_components(path: Path, options: PipelineOptions) -> dict[str, Any]:
    """Every component of the checkpoint on its device (the text encoder on
    ``text_encoder_device`` if given), in the options' dtype."""
    import transformers
    from diffusers import (
        AutoencoderKLLTX2Audio,
        AutoencoderKLLTX2Video,
        FlowMatchEulerDiscreteScheduler,
        LTX2VideoTransformer3DModel,
    )
    from diffusers.pipelines.ltx2 import LTX2TextConnectors
    from diffusers.pipelines.ltx2 import vocoder as vocoders

    index = json.loads((path / "model_index.json").read_text())
    scheduler = json.loads((path / "scheduler" / "scheduler_config.json").read_text())
    if scheduler.get("_class_name") != "FlowMatchEulerDiscreteScheduler" or scheduler.get(
        "stochastic_sampling"
    ):
        raise ConfigError(
            f"{path}: LTX-2 needs a deterministic FlowMatchEulerDiscreteScheduler, found "
            f"{scheduler.get('_class_name')!r}"
        )
    encoder_class = getattr(transformers, _named(index, "text_encoder", TEXT_ENCODERS, path))
    vocoder_class = getattr(vocoders, _named(index, "vocoder", VOCODERS, path))
    device, dtype = load_device(options), options.dtype
    encoder_device = options.extra.get("text_encoder_device") or device
    weights = {"use_safetensors": True}

    def model(cls: Any, key: str, where: Any = device, **kwargs: Any) -> Any:
        try:
            loaded = cls.from_pretrained(path / key, **(kwargs or dtype_kwargs(dtype)), **weights)
        except OSError as exc:  # diffusers' and transformers' "no file named ..."
            raise ConfigError(
                f"{path / key}: no safetensors weights to load (omni-ltx loads safetensors "
                f"only): {str(exc).splitlines()[0]}"
            ) from None
        return loaded.to(where).eval()

    return {
        "text_encoder": model(encoder_class, "text_encoder", encoder_device, dtype=dtype),
        "tokenizer": transformers.AutoTokenizer.from_pretrained(path / "tokenizer"),
        "connectors": model(LTX2TextConnectors, "connectors", encoder_device),
        "transformer": model(LTX2VideoTransformer3DModel, "transformer"),
        "vae": model(AutoencoderKLLTX2Video, "vae"),
        "audio_vae": model(AutoencoderKLLTX2Audio, "audio_vae"),
        "vocoder": model(vocoder_class, "vocoder"),
        "scheduler": FlowMatchEulerDiscreteScheduler.from_pretrained(path / "scheduler"),
    }
