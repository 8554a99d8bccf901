"""Loading a FLUX.1 checkpoint's components: diffusers' and transformers' own classes, as
diffusers' ``FluxPipeline`` loads them, safetensors only, each on the device it runs on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omni_core import ConfigError, PipelineOptions
from omni_core.diffusion import dtype_kwargs, load_device

#: The components of the official layout (``model_index.json``) the FLUX.1 pipelines read.
COMPONENTS = (
    "transformer",
    "vae",
    "text_encoder",
    "tokenizer",
    "text_encoder_2",
    "tokenizer_2",
    "scheduler",
)


def check_scheduler(path: Path) -> None:
    """FLUX's update is the deterministic flow-match Euler step; refuse anything else."""
    config = json.loads((path / "scheduler" / "scheduler_config.json").read_text())
    if config.get("_class_name") != "FlowMatchEulerDiscreteScheduler" or config.get(
        "stochastic_sampling"
    ):
        raise ConfigError(
            f"{path}: the FLUX pipelines need a deterministic FlowMatchEulerDiscreteScheduler, "
            f"found {config.get('_class_name')!r}"
        )


def load_components(path: Path, options: PipelineOptions) -> dict[str, Any]:
    """transformer, vae, the CLIP and T5 encoders with their tokenizers, and the scheduler.

    ``options.extra["text_encoder_device"]`` may put both text encoders elsewhere (e.g.
    ``"cpu"``: T5-XXL is 9.5 GB in bf16) to leave the GPU to the denoiser. Components to be
    offloaded (``options.memory.offload``) load on the host; ``apply_offload`` places them.
    """
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel
    from transformers import CLIPTextModel, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

    check_scheduler(path)
    device, dtype = load_device(options), options.dtype
    encoder_device = options.extra.get("text_encoder_device") or device
    weights = {"use_safetensors": True}
    return {
        "transformer": FluxTransformer2DModel.from_pretrained(
            path / "transformer", **dtype_kwargs(dtype), **weights
        )
        .to(device)
        .eval(),
        "vae": AutoencoderKL.from_pretrained(path / "vae", **dtype_kwargs(dtype), **weights)
        .to(device)
        .eval(),
        "text_encoder": CLIPTextModel.from_pretrained(path / "text_encoder", dtype=dtype, **weights)
        .to(encoder_device)
        .eval(),
        "text_encoder_2": T5EncoderModel.from_pretrained(
            path / "text_encoder_2", dtype=dtype, **weights
        )
        .to(encoder_device)
        .eval(),
        "tokenizer": CLIPTokenizer.from_pretrained(path / "tokenizer"),
        "tokenizer_2": T5TokenizerFast.from_pretrained(path / "tokenizer_2"),
        "scheduler": FlowMatchEulerDiscreteScheduler.from_pretrained(path / "scheduler"),
    }
