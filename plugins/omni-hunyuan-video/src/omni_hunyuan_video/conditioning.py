"""The transformer's condition inputs of one request: the condition latents with their frame
mask, and the SigLIP image tokens. Zeros for text to video; for image to video what diffusers'
``HunyuanVideo15ImageToVideoPipeline`` makes of the image, through its own helpers."""

from __future__ import annotations

from typing import Any

import torch

from omni_core import GenerationRequest

#: SigLIP tokens the transformer's image stream always carries (zeros for text-to-video).
IMAGE_TOKENS = 729


def condition_inputs(
    pipeline: Any, request: GenerationRequest, latents: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(condition [1, C + 1, F, h, w], image tokens [1, T, D])`` in ``latents``' dtype: for
    image to video the image cropped to the video's size, VAE-encoded into the first latent
    frame (mask 1 there), and its SigLIP tokens. ``pipeline`` is the HunyuanVideoPipeline."""
    assert request.height and request.width
    dtype = latents.dtype
    _, channels, frames, h, w = latents.shape
    condition = torch.zeros(1, channels + 1, frames, h, w, dtype=dtype, device=latents.device)
    layout = pipeline.layout
    if not layout.image_to_video:
        embeds = torch.zeros(
            1, IMAGE_TOKENS, layout.image_embed_dim, dtype=dtype, device=latents.device
        )
        return condition, embeds
    from diffusers import HunyuanVideo15ImageToVideoPipeline as Reference

    processor = pipeline.video_processor
    image = processor.resize(
        request.images[0], height=request.height, width=request.width, resize_mode="crop"
    )
    embeds = Reference._get_image_embeds(
        image_encoder=pipeline.image_encoder,
        feature_extractor=pipeline.feature_extractor,
        image=image,
        device=pipeline.device,
    )
    encoded = Reference._get_image_latents(
        vae=pipeline.vae,
        image_processor=processor,
        image=image,
        height=request.height,
        width=request.width,
        device=pipeline.device,
    )
    condition[:, :channels, :1] = encoded.to(dtype)
    condition[:, channels, 0] = 1.0
    return condition, embeds.to(device=latents.device, dtype=dtype)
