"""Wan's conditioning and decoding side: T5 prompts, the CLIP image (Wan2.1 I2V), VAE latents of
the conditioning image, and the VAE decode, exactly as diffusers' Wan pipelines compute them.

Any of the components may be absent when a caller gives prompt embeddings and never decodes
(step benchmarks); only the method that needs a missing one fails.
"""

from __future__ import annotations

from typing import Any

import torch

from omni_core.diffusion import VaeMemory, activation_bytes
from omni_wan.layout import WanLayout


class WanEncoders:
    """The tokenizer, text encoder, image encoder and VAE of one loaded Wan checkpoint."""

    def __init__(
        self, components: dict[str, Any], layout: WanLayout, device: Any, dtype: torch.dtype
    ) -> None:
        from diffusers.video_processor import VideoProcessor

        self.layout = layout
        self.device = device
        self.dtype = dtype
        self.tokenizer = components.get("tokenizer")
        self.text_encoder = components.get("text_encoder")
        self.image_encoder = components.get("image_encoder")
        self.image_processor = components.get("image_processor")
        self.vae = components.get("vae")
        self.video_processor = VideoProcessor(vae_scale_factor=layout.vae_spatial)
        #: Tiling / slicing of the VAE (set by the pipeline; None: the VAE as loaded).
        self.vae_memory: VaeMemory | None = None
        if self.vae is not None:
            vae_cfg = self.vae.config
            shape = (1, vae_cfg.z_dim, 1, 1, 1)
            self._latents_mean = torch.tensor(vae_cfg.latents_mean).view(shape)
            self._latents_std_inv = 1.0 / torch.tensor(vae_cfg.latents_std).view(shape)

    def text(self, prompts: list[str], max_length: int, out_dtype: torch.dtype) -> torch.Tensor:
        """T5 embeddings ``[len(prompts), max_length, D]`` of cleaned prompts, padding positions
        zeroed."""
        inputs = self.tokenizer(
            prompts,
            padding="max_length",
            max_length=max_length,
            truncation=True,
            add_special_tokens=True,
            return_attention_mask=True,
            return_tensors="pt",
        )
        # Token counts come from the host-side mask: no device round trip.
        lengths = inputs.attention_mask.gt(0).sum(dim=1).tolist()
        encoder_device = self.device  # where it runs, also when offloaded
        hidden = self.text_encoder(
            inputs.input_ids.to(encoder_device), inputs.attention_mask.to(encoder_device)
        ).last_hidden_state
        hidden = hidden.to(device=self.device, dtype=self.dtype)
        # Wan zeroes the padding positions (diffusers trims to the length, then pads with 0).
        out = torch.zeros_like(hidden)
        for i, length in enumerate(lengths):
            out[i, :length] = hidden[i, :length]
        return out.to(out_dtype)

    def image(self, image: Any, out_dtype: torch.dtype) -> torch.Tensor:
        """CLIP's penultimate hidden states of the conditioning image (Wan2.1 I2V)."""
        assert self.image_encoder is not None and self.image_processor is not None
        encoder_device = self.device
        pixels = self.image_processor(images=image, return_tensors="pt").to(encoder_device)
        hidden = self.image_encoder(**pixels, output_hidden_states=True).hidden_states[-2]
        return hidden.to(self.device, out_dtype)

    def condition(self, image: Any, height: int, width: int, frames: int) -> torch.Tensor:
        """VAE latents of the conditioning image (first frame; zeros after it for I2V)."""
        pixels = self.video_processor.preprocess(image, height=height, width=width)
        pixels = pixels.to(self.device, torch.float32).unsqueeze(2)
        if not self.layout.expand_timesteps:
            pixels = torch.cat([pixels, pixels.new_zeros(1, 3, frames - 1, height, width)], dim=2)
        if self.vae_memory is not None:
            self.vae_memory.before(activation_bytes(pixels.numel() // 3, 96, 4))
        posterior = self.vae.encode(pixels.to(self.device, self.vae.dtype)).latent_dist
        condition = posterior.mode().to(self.device, torch.float32)
        mean = self._latents_mean.to(condition.device)
        std_inv = self._latents_std_inv.to(condition.device)
        return (condition - mean) * std_inv

    def decode(self, latents: torch.Tensor) -> Any:
        """Normalised latents -> ``frames x H x W x 3`` uint8 (a numpy array)."""
        latents = latents.to(self.device, self.vae.dtype)
        if self.vae_memory is not None:  # causal: 4 frames at a time, plus the whole output
            _, _, frames, height, width = latents.shape
            pixels = 4 * height * width * self.layout.vae_spatial**2
            base = int(self.vae.config.get("base_dim", 96))
            work = activation_bytes(pixels, base, self.vae.dtype.itemsize)
            self.vae_memory.before(frames * pixels * 3 * 4 + work)
        mean = self._latents_mean.to(latents.device, latents.dtype)
        std_inv = self._latents_std_inv.to(latents.device, latents.dtype)
        video = self.vae.decode(latents / std_inv + mean, return_dict=False)[0]
        # diffusers' VideoProcessor "np" output is (x / 2 + 0.5).clamp(0, 1); to uint8 on device.
        frames = ((video[0] / 2 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8)
        return frames.permute(1, 2, 3, 0).contiguous().cpu().numpy()
