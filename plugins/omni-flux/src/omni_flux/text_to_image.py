"""FLUX.1 text-to-image (dev, schnell): diffusers' ``FluxPipeline`` on omni's staged runtime.

What is FLUX.1's own, on the shared stages of :mod:`omni_flux.staged`:

* CLIP's pooled output and T5's sequence embed the prompt (``prompt_2``: T5's own text); text
  position ids are zeros ``[L, 3]``;
* noise is drawn as ``[n, C, H/8, W/8]`` and packed into 2x2 patches, with (0, row, column)
  position ids;
* the sigmas' shift ``mu`` grows linearly with the image tokens (diffusers' ``calculate_shift``;
  FLUX.1-schnell's scheduler config has no dynamic shift and ignores it);
* ``guidance_scale`` is the embedded guidance of guidance-distilled checkpoints (dev, Kontext);
  true CFG runs with ``true_cfg_scale`` > 1 and a negative prompt;
* the VAE decodes ``latents / scaling_factor + shift_factor``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch
from pydantic import BaseModel

from omni_core import GenerationRequest, PipelineOptions
from omni_flux.extras import FluxExtras
from omni_flux.latents import cat, image_ids, pack, unpack
from omni_flux.layout import FluxLayout, check_request
from omni_flux.prompts import FluxPromptEncoder, PromptEmbeds
from omni_flux.staged import FluxStagedPipeline, FluxState

__all__ = ["FluxImagePipeline", "FluxState"]


class FluxImagePipeline(FluxStagedPipeline):
    """FLUX.1-dev / schnell text-to-image (diffusers' ``FluxPipeline``)."""

    extras_model: ClassVar[type[BaseModel]] = FluxExtras
    load_options: ClassVar[dict[str, str]] = {
        "text_encoder_device": "device of the CLIP and T5 text encoders (default: the model's)",
        "prompt_cache_size": "encoded prompts kept in the LRU cache (default 64)",
        "cfg_batch": "auto (default) / always: true CFG's two branches in one forward; never: "
        "two forwards per step, as diffusers runs them",
    }
    family: ClassVar[str] = "flux"

    @classmethod
    def _load(cls, path: Path, options: PipelineOptions) -> tuple[FluxLayout, dict[str, Any]]:
        from omni_flux.loading import load_components

        return FluxLayout.read(path), load_components(path, options)

    @classmethod
    def _check(cls, layout: FluxLayout, request: GenerationRequest) -> GenerationRequest:
        return check_request(
            layout, request, family=cls.family, extras_model=cls.extras_model, edits=cls.edits
        )

    def _prompt_encoder(self, components: dict[str, Any], encoder_device: Any, size: int) -> Any:
        return FluxPromptEncoder(components, self.device, encoder_device, size)

    def _encode(self, text: str, extras: Any, *, negative: bool) -> PromptEmbeds:
        second = extras.negative_prompt_2 if negative else extras.prompt_2
        return self.prompts.encode(text, second, extras.max_sequence_length)

    def _cfg(self, request: GenerationRequest, extras: Any) -> tuple[bool, float]:
        scale = float(extras.true_cfg_scale)
        return scale > 1 and request.negative_prompt is not None, scale

    def _info(self, extras: Any) -> dict[str, Any]:
        return {"true_cfg_scale": extras.true_cfg_scale}

    def _noise(
        self, rows: int, lat_h: int, lat_w: int, generator: torch.Generator, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        from diffusers.utils.torch_utils import randn_tensor

        shape = (rows, self.layout.latent_channels, lat_h, lat_w)
        noise = randn_tensor(shape, generator=generator, device=self.device, dtype=dtype)
        ids = image_ids(lat_h // 2, lat_w // 2).to(device=self.device, dtype=dtype)
        return pack(noise), ids

    def _text_inputs(self, prompts: list[tuple[PromptEmbeds, int]]) -> dict[str, torch.Tensor]:
        pooled = [p.pooled.expand(rows, -1) for p, rows in prompts]  # type: ignore[union-attr]
        sequence = [p.sequence.expand(rows, -1, -1) for p, rows in prompts]
        return {"pooled_projections": cat(pooled), "encoder_hidden_states": cat(sequence)}

    def _text_ids(self, length: int) -> torch.Tensor:
        return torch.zeros(length, 3)

    def _mu(self, image_seq_len: int, steps: int) -> float:
        config = self.scheduler.config
        base_len = config.get("base_image_seq_len", 256)
        max_len = config.get("max_image_seq_len", 4096)
        base_shift = config.get("base_shift", 0.5)
        max_shift = config.get("max_shift", 1.15)
        slope = (max_shift - base_shift) / (max_len - base_len)
        return image_seq_len * slope + (base_shift - slope * base_len)

    def _to_vae(self, state: FluxState) -> torch.Tensor:
        assert state.latents is not None
        vsf = self.layout.vae_scale_factor
        lat_h, lat_w = 2 * (state.height // (vsf * 2)), 2 * (state.width // (vsf * 2))
        latents = unpack(state.latents, lat_h, lat_w)
        config = self.vae.config
        return (latents / config.scaling_factor) + config.shift_factor
