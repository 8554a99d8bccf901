"""FLUX.1-Kontext: the text-to-image pipeline plus one input image to edit.

The input image is resized to the Kontext training resolution nearest its aspect ratio (unless
``auto_resize`` is off), encoded by the VAE (its mode, shifted and scaled), packed, and appended
to the image sequence with position ids whose frame index is 1; the transformer's output for
those tokens is dropped. Without a size the output takes the input's (resized) size, as BFL's
reference does; with one, it is exactly that size (diffusers: ``max_area = width * height``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import BaseModel

from omni_core import GenerationRequest
from omni_core.diffusion import activation_bytes
from omni_flux.extras import KontextExtras
from omni_flux.latents import image_ids, pack
from omni_flux.layout import kontext_size
from omni_flux.staged import Condition
from omni_flux.text_to_image import FluxImagePipeline


class FluxKontextPipeline(FluxImagePipeline):
    """FLUX.1-Kontext-dev: one input image and an instruction (diffusers' FluxKontextPipeline)."""

    extras_model: ClassVar[type[BaseModel]] = KontextExtras
    edits: ClassVar[bool] = True
    family: ClassVar[str] = "flux-kontext"

    def _condition(self, request: GenerationRequest, generator: torch.Generator) -> Condition:
        extras = KontextExtras.model_construct(**request.extras)
        (image,) = request.images
        width, height = kontext_size(image, self.layout.multiple, extras.auto_resize)
        pixels = self.image_processor.preprocess(
            self.image_processor.resize(image, height, width), height, width
        )
        dtype = self.dtype  # diffusers casts the image to the prompt embeddings' dtype
        pixels = pixels.to(device=self.device, dtype=dtype)
        width0 = int(self.vae.config.block_out_channels[0])
        self.vae_memory.before(activation_bytes(height * width, width0, pixels.element_size()))
        latents = self.vae.encode(pixels).latent_dist.mode()
        config = self.vae.config
        latents = (latents - config.shift_factor) * config.scaling_factor
        ids = image_ids(latents.shape[2] // 2, latents.shape[3] // 2, frame=1)
        return pack(latents), ids

    def warmup_fields(self) -> dict[str, Any]:
        from PIL import Image

        return {
            "prompt": "warm-up",
            "num_inference_steps": 1,
            "images": [Image.new("RGB", (64, 64), (128, 128, 128))],
            "extras": {"auto_resize": False},
        }
