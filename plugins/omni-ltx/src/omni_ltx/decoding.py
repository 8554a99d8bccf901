"""The decode stage of LTX-2: the video VAE (with its decode timestep and noise where the VAE
is timestep-conditioned) and, for the sound track, the audio VAE and the vocoder, as diffusers'
``LTX2Pipeline.__call__`` ends."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:  # pragma: no cover
    from omni_ltx.pipeline import LTXPipeline
    from omni_ltx.setup import Setup


def decode_video(pipe: LTXPipeline, setup: Setup, extras: dict[str, Any]) -> np.ndarray:
    """``uint8 [F, H, W, 3]`` frames."""
    from diffusers import LTX2Pipeline as Reference
    from diffusers.utils.torch_utils import randn_tensor

    config = pipe.transformer.config
    latents = Reference._unpack_latents(
        setup.latents,
        setup.frames,
        setup.height,
        setup.width,
        int(config.patch_size),
        int(config.patch_size_t),
    ).to(pipe.transformer.dtype)
    vae = pipe.vae
    timestep = None
    if vae.config.timestep_conditioning:
        noise = randn_tensor(
            latents.shape, generator=setup.generator, device=latents.device, dtype=latents.dtype
        )
        at = float(extras.get("decode_timestep", 0.0))
        scale = extras.get("decode_noise_scale")
        scale = at if scale is None else float(scale)
        timestep = torch.tensor([at], device=latents.device, dtype=latents.dtype)
        latents = (1 - scale) * latents + scale * noise
    latents = Reference._denormalize_latents(
        latents, vae.latents_mean, vae.latents_std, vae.config.scaling_factor
    )
    video = vae.decode(latents.to(vae.dtype), timestep, return_dict=False)[0]
    frames = pipe.video_processor.postprocess_video(video, output_type="np")[0]
    return (frames * 255).round().clip(0, 255).astype("uint8")


def decode_audio(pipe: LTXPipeline, setup: Setup) -> tuple[np.ndarray, int]:
    """float32 ``[samples, channels]`` PCM and its rate (the vocoder's output rate)."""
    from diffusers import LTX2Pipeline as Reference

    audio_vae = pipe.audio_vae
    latents = Reference._denormalize_audio_latents(
        setup.audio_latents, audio_vae.latents_mean, audio_vae.latents_std
    )
    latents = Reference._unpack_audio_latents(
        latents, setup.audio_frames, num_mel_bins=setup.mel_bins
    )
    mel = audio_vae.decode(latents.to(audio_vae.dtype), return_dict=False)[0]
    wave = pipe.vocoder(mel)[0]  # [channels, samples]
    rate = int(pipe.vocoder.config.output_sampling_rate)
    return wave.float().cpu().numpy().T.copy(), rate
