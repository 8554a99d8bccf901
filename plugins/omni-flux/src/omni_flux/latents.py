"""Tensor helpers of the FLUX.1 step: 2x2 latent packing, position ids, the CFG mix and the
Euler update, rounding exactly as diffusers' ``FluxPipeline`` and its scheduler do.

None of them synchronises with the host, so a denoising step stays asynchronous.
"""

from __future__ import annotations

from typing import Any

import torch


def cat(tensors: list[Any]) -> torch.Tensor:
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors, dim=0)


def pack(latents: torch.Tensor) -> torch.Tensor:
    """``[B, C, H, W]`` latents -> ``[B, H/2 * W/2, C*4]`` 2x2 patches (``_pack_latents``)."""
    batch, channels, height, width = latents.shape
    x = latents.view(batch, channels, height // 2, 2, width // 2, 2)
    x = x.permute(0, 2, 4, 1, 3, 5)
    return x.reshape(batch, (height // 2) * (width // 2), channels * 4)


def unpack(latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``[B, seq, C*4]`` -> ``[B, C, H, W]`` for the VAE (``height``/``width`` in latent pixels)."""
    batch, _, channels = latents.shape
    x = latents.view(batch, height // 2, width // 2, channels // 4, 2, 2)
    x = x.permute(0, 3, 1, 4, 2, 5)
    return x.reshape(batch, channels // 4, height, width)


def image_ids(height: int, width: int, *, frame: int = 0) -> torch.Tensor:
    """``[height * width, 3]`` position ids of packed latents (``_prepare_latent_image_ids``):
    (frame, row, column); Kontext marks its input image's tokens with frame 1."""
    ids = torch.zeros(height, width, 3)
    ids[..., 0] = frame
    ids[..., 1] = ids[..., 1] + torch.arange(height)[:, None]
    ids[..., 2] = ids[..., 2] + torch.arange(width)[None, :]
    return ids.reshape(height * width, 3)


def cfg_mix(cond: torch.Tensor, uncond: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``uncond + s * (cond - uncond)`` with ``s`` a per-row float32 ``[rows, 1, 1]``.

    diffusers multiplies by a Python float, which PyTorch applies in float before rounding to
    the model dtype; the float32 product rounded once does the same, so bf16 results are equal.
    """
    return uncond + (scale * (cond - uncond).float()).to(cond.dtype)


def euler(latents: torch.Tensor, velocity: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
    """``FlowMatchEulerDiscreteScheduler.step`` for a batch, rounding exactly as it does.

    The reference computes ``sample.float() + dt * v`` with ``dt`` a 0-dim float32 tensor and
    ``v`` in the model dtype: type promotion keeps the product in the model dtype, with ``dt``
    cast to it first; the sum is float32, cast back to the model dtype.
    """
    return (latents.float() + dt.to(velocity.dtype) * velocity).to(velocity.dtype)
