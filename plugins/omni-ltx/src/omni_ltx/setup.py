"""One request's noise, conditioning, positions and schedule, made as diffusers makes them
(``prepare_latents``, ``prepare_audio_latents``, ``retrieve_timesteps`` with the dynamic
shift, the rope coordinates at the conditioning frame rate ``fps / motion_speed``; for image
to video the encoded first frame and its mask)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from omni_core import GenerationRequest
from omni_ltx.extras import LTXExtras

if TYPE_CHECKING:  # pragma: no cover
    from omni_ltx.pipeline import LTXPipeline


@dataclass
class Setup:
    """What the steps and the decode of one request need."""

    latents: torch.Tensor  # [1, S, C] packed video latents, float32
    audio_latents: torch.Tensor  # [1, L, C * M] packed audio latents, float32
    mask: torch.Tensor | None  # [1, S]: 1 on the image's tokens (image to video)
    video_coords: torch.Tensor
    audio_coords: torch.Tensor
    timesteps: torch.Tensor  # [steps]
    sigmas: torch.Tensor  # [steps + 1], float32
    frames: int  # latent frames, height, width; audio latent frames and mel bins
    height: int
    width: int
    audio_frames: int
    mel_bins: int
    fps: int  # the playback rate (and the sound's length)
    conditioning_fps: float  # what the positions and the transformer see: fps / motion_speed
    generator: torch.Generator  # diffusers draws the decode noise from it last

    @property
    def shape_key(self) -> tuple[float, ...]:
        return (
            self.frames,
            self.height,
            self.width,
            self.audio_frames,
            self.fps,
            self.conditioning_fps,
        )


def prepare_setup(
    pipe: LTXPipeline, request: GenerationRequest, extras: LTXExtras, seed: int
) -> Setup:
    from diffusers import LTX2Pipeline as Reference
    from diffusers.pipelines.ltx2.pipeline_ltx2 import calculate_shift
    from diffusers.utils.torch_utils import randn_tensor

    assert request.height and request.width and request.num_frames and request.num_inference_steps
    layout, device = pipe.layout, pipe.device
    config = pipe.transformer.config
    p, pt = int(config.patch_size), int(config.patch_size_t)
    frames = (request.num_frames - 1) // layout.temporal + 1
    height, width = request.height // layout.spatial, request.width // layout.spatial
    generator = torch.Generator("cpu").manual_seed(seed)
    shape = (1, int(config.in_channels), frames, height, width)
    mask = None
    if layout.image_to_video:
        latents, mask = _image_latents(pipe, request, shape, generator)
    else:
        noise = randn_tensor(shape, generator=generator, device=device, dtype=torch.float32)
        latents = Reference._pack_latents(noise, p, pt)
    audio_vae = pipe.audio_vae.config
    rate = float(extras.fps)
    conditioning = rate / float(extras.motion_speed)  # diffusers' conditioning_frame_rate
    per_second = (
        audio_vae.sample_rate
        / audio_vae.mel_hop_length
        / float(pipe.audio_vae.temporal_compression_ratio)
    )
    audio_frames = round(request.num_frames / rate * per_second)
    mel_bins = audio_vae.mel_bins // pipe.audio_vae.mel_compression_ratio
    audio_shape = (1, audio_vae.latent_channels, audio_frames, mel_bins)
    audio = randn_tensor(audio_shape, generator=generator, device=device, dtype=torch.float32)
    audio = Reference._pack_audio_latents(audio)
    timesteps, sigmas = _schedule(
        pipe, request.num_inference_steps, latents.shape[1], calculate_shift
    )
    return Setup(
        latents=latents,
        audio_latents=audio,
        mask=mask,
        video_coords=pipe.transformer.rope.prepare_video_coords(
            1, frames, height, width, latents.device, fps=conditioning
        ),
        audio_coords=pipe.transformer.audio_rope.prepare_audio_coords(1, audio_frames, device),
        timesteps=timesteps,
        sigmas=sigmas,
        frames=frames,
        height=height,
        width=width,
        audio_frames=audio_frames,
        mel_bins=mel_bins,
        fps=int(extras.fps),
        conditioning_fps=conditioning,
        generator=generator,
    )


def _schedule(pipe: LTXPipeline, steps: int, tokens: int, shift: Any) -> tuple[Any, Any]:
    """(timesteps, sigmas incl. the final 0), as ``retrieve_timesteps`` sets them."""
    import numpy as np

    config = pipe.scheduler.config
    mu = shift(
        tokens,
        config.get("base_image_seq_len", 1024),
        config.get("max_image_seq_len", 4096),
        config.get("base_shift", 0.95),
        config.get("max_shift", 2.05),
    )
    scheduler = type(pipe.scheduler).from_config(config)
    sigmas = np.linspace(1.0, 1 / steps, steps)
    scheduler.set_timesteps(sigmas=sigmas, device=pipe.device, mu=mu)
    return scheduler.timesteps, scheduler.sigmas.to(torch.float32)


def _image_latents(
    pipe: LTXPipeline, request: GenerationRequest, shape: tuple[int, ...], generator: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first frame VAE-encoded from the request's image, the rest noise, and the mask,
    packed (``LTX2ImageToVideoPipeline.prepare_latents``)."""
    import numpy as np
    from diffusers import LTX2ImageToVideoPipeline as Reference
    from diffusers.pipelines.ltx2.pipeline_ltx2_image2video import retrieve_latents
    from diffusers.pipelines.ltx2.utils import (
        apply_image_conditioning_crf,
        resolve_default_image_crf,
    )
    from diffusers.utils.torch_utils import randn_tensor
    from PIL import Image

    image = request.images[0]
    crf = request.extras.get("image_crf")
    crf = resolve_default_image_crf(pipe.text_encoder) if crf is None else int(crf)
    if crf != 0:
        image = Image.fromarray(apply_image_conditioning_crf(np.array(image.convert("RGB")), crf))
    pixels = pipe.video_processor.preprocess(image, height=request.height, width=request.width)
    pixels = pixels.to(device=pipe.device, dtype=pipe.transformer.dtype)
    vae = pipe.vae
    encoded = retrieve_latents(vae.encode(pixels.unsqueeze(2).to(vae.dtype)), generator, "argmax")
    encoded = Reference._normalize_latents(
        encoded.to(torch.float32), vae.latents_mean, vae.latents_std
    )
    encoded = encoded.repeat(1, 1, shape[2], 1, 1)
    mask = torch.zeros((1, 1, *shape[2:]), device=pipe.device, dtype=torch.float32)
    mask[:, :, 0] = 1.0
    noise = randn_tensor(shape, generator=generator, device=pipe.device, dtype=torch.float32)
    latents = encoded * mask + noise * (1 - mask)
    config = pipe.transformer.config
    p, pt = int(config.patch_size), int(config.patch_size_t)
    return Reference._pack_latents(latents, p, pt), Reference._pack_latents(mask, p, pt).squeeze(-1)
