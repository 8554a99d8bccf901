"""FLUX.2-dev and FLUX.2-klein text-to-image: diffusers' ``Flux2Pipeline`` and
``Flux2KleinPipeline`` on omni's staged runtime (:mod:`omni_flux.staged`).

What is FLUX.2's own:

* one text encoder (Mistral 3 for dev, behind a ``PixtralProcessor`` chat template with
  FLUX.2's system message; Qwen3 for klein, chat template without thinking); the prompt is the
  stack of three hidden layers (10/20/30, klein 9/18/27), computed by diffusers' own prompt
  functions; text position ids are (0, 0, 0, token) ``[L, 4]``;
* noise is drawn already patchified, ``[n, C*4, H/16, W/16]``, and flattened to tokens with
  (0, row, column, 0) ids;
* ``mu`` is diffusers' empirical fit of image tokens *and* steps (``compute_empirical_mu``);
* dev's transformer takes ``guidance_scale`` as its embedded guidance (no CFG); klein's does not:
  it runs real classifier-free guidance when ``guidance_scale`` > 1 (against the negative prompt,
  default empty, as diffusers), except on step-distilled checkpoints (``is_distilled``);
* the VAE's batch-norm statistics un-normalise the latents, which are un-patchified for
  ``AutoencoderKLFlux2``.

Reference images (FLUX.2's multi-image editing) and the step caches (its single-stream blocks
return the joint text + image sequence, which the block caches cannot reuse) are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch
from pydantic import BaseModel

from omni_core import ConfigError, GenerationRequest, InvalidRequestError, PipelineOptions
from omni_core.diffusion import LRUCache, dtype_kwargs, load_device
from omni_flux.extras import Flux2Extras
from omni_flux.latents import cat
from omni_flux.layout import DEFAULT_SIDE, FluxLayout, parse_extras, size_error
from omni_flux.loading import check_scheduler
from omni_flux.prompts import PromptEmbeds
from omni_flux.staged import FluxStagedPipeline, FluxState

#: diffusers' defaults: 50 steps, guidance 4.0; step-distilled klein: BFL's 4 steps.
DEFAULT_STEPS = 50
DISTILLED_STEPS = 4
DEFAULT_GUIDANCE = 4.0


def check_flux2_request(
    layout: FluxLayout, request: GenerationRequest, *, family: str, klein: bool
) -> GenerationRequest:
    """Complete the defaults of a FLUX.2 request and reject what it cannot do, before compute."""
    extras = parse_extras(Flux2Extras, request.extras)
    if request.num_frames not in (None, 1):
        raise InvalidRequestError(
            f"{family} makes images; num_frames must be 1, not {request.num_frames}",
            param="num_frames",
        )
    if request.images:
        raise InvalidRequestError(
            f"{family}: reference images (FLUX.2's multi-image editing) are not supported by "
            "omni-flux yet; give a prompt only",
            param="images",
        )
    default = max(layout.multiple, DEFAULT_SIDE // layout.multiple * layout.multiple)
    height, width = request.height or default, request.width or default
    for name, value in (("height", height), ("width", width)):
        if value % layout.multiple or value < layout.multiple:
            raise InvalidRequestError(size_error(name, value, layout), param="size")
    guidance = request.guidance_scale
    if klein and layout.distilled:
        if guidance is not None and guidance > 1:
            raise InvalidRequestError(
                f"guidance_scale={guidance}: this FLUX.2-klein checkpoint is step-distilled and "
                "runs without guidance (diffusers ignores the scale); leave it out or use <= 1",
                param="guidance_scale",
            )
        cfg = False
    else:
        guidance = DEFAULT_GUIDANCE if guidance is None else guidance
        cfg = klein and guidance > 1
    if request.negative_prompt is not None and not cfg:
        why = (
            "FLUX.2-dev has no classifier-free guidance (guidance_scale is its embedded guidance)"
            if not klein
            else "classifier-free guidance runs only with guidance_scale > 1 on a base "
            "(not step-distilled) FLUX.2-klein"
        )
        raise InvalidRequestError(
            f"negative_prompt: {why}; without it the negative prompt would have no effect",
            param="negative_prompt",
        )
    steps = request.num_inference_steps
    if steps is None:
        steps = DISTILLED_STEPS if layout.distilled else DEFAULT_STEPS
    return request.model_copy(
        update={
            "height": height,
            "width": width,
            "num_frames": None,
            "guidance_scale": guidance,
            "num_inference_steps": steps,
            "extras": extras.model_dump(),
        }
    )


def load_flux2_components(path: Path, options: PipelineOptions, *, klein: bool) -> dict[str, Any]:
    """transformer, vae, the text encoder with its tokenizer (dev: the Pixtral processor) and the
    scheduler, with diffusers' and transformers' own classes, safetensors only."""
    from diffusers import (
        AutoencoderKLFlux2,
        FlowMatchEulerDiscreteScheduler,
        Flux2Transformer2DModel,
    )

    if options.cache.backend:
        raise ConfigError(
            f"cache.backend: {options.cache.backend!r} cannot run on FLUX.2: its single-stream "
            "blocks return the joint text + image sequence, which the step caches cannot reuse"
        )
    check_scheduler(path)
    device, dtype = load_device(options), options.dtype
    encoder_device = options.extra.get("text_encoder_device") or device
    if klein:
        from transformers import Qwen2TokenizerFast, Qwen3ForCausalLM

        encoder_cls: Any = Qwen3ForCausalLM
        tokenizer = Qwen2TokenizerFast.from_pretrained(path / "tokenizer")
    else:
        from transformers import Mistral3ForConditionalGeneration

        from omni_flux.compat import load_mistral_processor

        encoder_cls = Mistral3ForConditionalGeneration
        tokenizer = load_mistral_processor(path / "tokenizer")
    weights = {"use_safetensors": True}
    return {
        "transformer": Flux2Transformer2DModel.from_pretrained(
            path / "transformer", **dtype_kwargs(dtype), **weights
        )
        .to(device)
        .eval(),
        "vae": AutoencoderKLFlux2.from_pretrained(path / "vae", **dtype_kwargs(dtype), **weights)
        .to(device)
        .eval(),
        "text_encoder": encoder_cls.from_pretrained(path / "text_encoder", dtype=dtype, **weights)
        .to(encoder_device)
        .eval(),
        "tokenizer": tokenizer,
        "scheduler": FlowMatchEulerDiscreteScheduler.from_pretrained(path / "scheduler"),
    }


class Flux2PromptEncoder:
    """FLUX.2's text encoder through diffusers' own prompt functions, with an LRU cache."""

    def __init__(
        self, components: dict[str, Any], device: Any, encoder_device: Any, size: int, klein: bool
    ) -> None:
        self.text_encoder = components["text_encoder"]
        self.tokenizer = components["tokenizer"]
        self.device = device
        self.encoder_device = encoder_device
        self.klein = klein
        self.cache = LRUCache(size)

    def encode(self, prompt: str, max_sequence_length: int) -> PromptEmbeds:
        key = (prompt, max_sequence_length, str(self.device))
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        common = {
            "text_encoder": self.text_encoder,
            "tokenizer": self.tokenizer,
            "prompt": [prompt],
            "device": self.encoder_device,
            "max_sequence_length": max_sequence_length,
        }
        if self.klein:
            from diffusers import Flux2KleinPipeline

            sequence = Flux2KleinPipeline._get_qwen3_prompt_embeds(**common)
        else:
            from diffusers import Flux2Pipeline
            from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE

            sequence = Flux2Pipeline._get_mistral_3_small_prompt_embeds(
                **common, system_message=SYSTEM_MESSAGE
            )
        embeds = PromptEmbeds(sequence=sequence.to(self.device), pooled=None)
        self.cache.put(key, embeds)
        return embeds


class Flux2ImagePipeline(FluxStagedPipeline):
    """FLUX.2-dev text-to-image (diffusers' ``Flux2Pipeline``): embedded guidance, no CFG."""

    extras_model: ClassVar[type[BaseModel]] = Flux2Extras
    load_options: ClassVar[dict[str, str]] = {
        "text_encoder_device": "device of the text encoder (default: the model's)",
        "prompt_cache_size": "encoded prompts kept in the LRU cache (default 64)",
        "cfg_batch": "auto (default) / always: CFG's two branches in one forward (klein); "
        "never: two forwards per step, as diffusers runs them",
    }
    family: ClassVar[str] = "flux2"
    klein: ClassVar[bool] = False

    @classmethod
    def _load(cls, path: Path, options: PipelineOptions) -> tuple[FluxLayout, dict[str, Any]]:
        components = load_flux2_components(path, options, klein=cls.klein)
        return FluxLayout.read(path), components

    @classmethod
    def _check(cls, layout: FluxLayout, request: GenerationRequest) -> GenerationRequest:
        return check_flux2_request(layout, request, family=cls.family, klein=cls.klein)

    @staticmethod
    def _lora_reader() -> Any:
        def read(path: Path) -> tuple[dict[str, Any], Any]:
            from diffusers import Flux2Pipeline

            return Flux2Pipeline.lora_state_dict(
                str(path.parent), weight_name=path.name, return_lora_metadata=True
            )

        return read

    def _image_processor(self, multiple: int) -> Any:
        from diffusers.pipelines.flux2.image_processor import Flux2ImageProcessor

        return Flux2ImageProcessor(vae_scale_factor=multiple)

    def _prompt_encoder(self, components: dict[str, Any], encoder_device: Any, size: int) -> Any:
        return Flux2PromptEncoder(components, self.device, encoder_device, size, self.klein)

    def _encode(self, text: str, extras: Any, *, negative: bool) -> PromptEmbeds:
        return self.prompts.encode(text, extras.max_sequence_length)

    def _cfg(self, request: GenerationRequest, extras: Any) -> tuple[bool, float]:
        return False, 1.0

    def _noise(
        self, rows: int, lat_h: int, lat_w: int, generator: torch.Generator, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        from diffusers.utils.torch_utils import randn_tensor

        shape = (rows, self.layout.latent_channels * 4, lat_h // 2, lat_w // 2)
        noise = randn_tensor(shape, generator=generator, device=self.device, dtype=dtype)
        one = torch.arange(1)  # the time and layer axes
        ids = torch.cartesian_prod(one, torch.arange(lat_h // 2), torch.arange(lat_w // 2), one)
        tokens = noise.reshape(rows, shape[1], -1).permute(0, 2, 1)
        return tokens, ids.to(self.device)

    def _text_inputs(self, prompts: list[tuple[PromptEmbeds, int]]) -> dict[str, torch.Tensor]:
        return {"encoder_hidden_states": cat([p.sequence.expand(r, -1, -1) for p, r in prompts])}

    def _text_ids(self, length: int) -> torch.Tensor:
        zero = torch.arange(1)
        return torch.cartesian_prod(zero, zero, zero, torch.arange(length))

    def _mu(self, image_seq_len: int, steps: int) -> float:
        from diffusers.pipelines.flux2.pipeline_flux2 import compute_empirical_mu

        return compute_empirical_mu(image_seq_len=image_seq_len, num_steps=steps)

    def _to_vae(self, state: FluxState) -> torch.Tensor:
        assert state.latents is not None
        vsf = self.layout.vae_scale_factor
        height, width = state.height // (vsf * 2), state.width // (vsf * 2)
        rows, _, channels = state.latents.shape
        latents = state.latents.permute(0, 2, 1).reshape(rows, channels, height, width)
        bn = self.vae.bn
        mean = bn.running_mean.view(1, -1, 1, 1).to(latents.device, latents.dtype)
        std = torch.sqrt(bn.running_var.view(1, -1, 1, 1) + self.vae.config.batch_norm_eps)
        latents = latents * std.to(latents.device, latents.dtype) + mean
        # un-patchify: [n, C*4, h, w] -> [n, C, 2h, 2w] (diffusers' _unpatchify_latents)
        latents = latents.reshape(rows, channels // 4, 2, 2, height, width)
        latents = latents.permute(0, 1, 4, 2, 5, 3)
        return latents.reshape(rows, channels // 4, height * 2, width * 2)


class Flux2KleinImagePipeline(Flux2ImagePipeline):
    """FLUX.2-klein text-to-image (diffusers' ``Flux2KleinPipeline``): real CFG on base
    checkpoints (``guidance_scale`` > 1), none on step-distilled ones."""

    family: ClassVar[str] = "flux2-klein"
    klein: ClassVar[bool] = True

    def _cfg(self, request: GenerationRequest, extras: Any) -> tuple[bool, float]:
        scale = float(request.guidance_scale or 0.0)
        return (not self.layout.distilled and scale > 1), scale
