"""Tensor helpers of the Qwen-Image step: 2x2 latent packing, prompt padding, the Euler update.

None of them synchronises with the host, so a denoising step stays asynchronous.
"""

from __future__ import annotations

from typing import Any

import torch


def branch_names(count: int) -> list[str | None]:
    """Cache-context branch names: one batched CFG forward, or cond then uncond."""
    return ["cfg"] if count == 1 else ["cond", "uncond"]


def cat(tensors: list[Any]) -> torch.Tensor:
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors, dim=0)


def pack(latents: torch.Tensor) -> torch.Tensor:
    """[B, C, 1, H, W] or [B, 1, C, H, W] latents -> [B, H/2 * W/2, C*4] 2x2 patches."""
    batch, (height, width) = latents.shape[0], latents.shape[-2:]
    channels = latents.numel() // (batch * height * width)
    x = latents.reshape(batch, channels, height // 2, 2, width // 2, 2)
    x = x.permute(0, 2, 4, 1, 3, 5)
    return x.reshape(batch, (height // 2) * (width // 2), channels * 4)


def unpack(latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """[B, seq, C*4] -> [B, C, 1, H, W] for the VAE (``height``/``width`` in latent pixels)."""
    batch, _, channels = latents.shape
    x = latents.view(batch, height // 2, width // 2, channels // 4, 2, 2)
    x = x.permute(0, 3, 1, 4, 2, 5)
    return x.reshape(batch, channels // 4, 1, height, width)


def pad(embeds: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Stack ``[rows, L_i, D]`` prompt embeddings, zero-padded to the longest, plus its mask.

    The mask is ``None`` when every prompt has the same length: the transformer then takes its
    unmasked (fastest) attention path, exactly as the reference does for one prompt.
    """
    lengths = [e.shape[1] for e in embeds]
    longest = max(lengths)
    if all(length == longest for length in lengths):
        return cat(embeds), None
    padded, masks = [], []
    for e, length in zip(embeds, lengths, strict=True):
        rows = e.shape[0]
        padded.append(torch.cat([e, e.new_zeros(rows, longest - length, e.shape[2])], dim=1))
        mask = torch.zeros(rows, longest, dtype=torch.bool, device=e.device)
        mask[:, :length] = True
        masks.append(mask)
    return torch.cat(padded, dim=0), torch.cat(masks, dim=0)


def euler(latents: torch.Tensor, velocity: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
    """``FlowMatchEulerDiscreteScheduler.step`` for a batch, rounding exactly as it does.

    The reference computes ``sample.float() + dt * v`` with ``dt`` a 0-dim float32 tensor and
    ``v`` in the model dtype: type promotion keeps the product in the model dtype, with ``dt``
    cast to it first. Python-scalar CFG scales are different (kept in float), see ``step``.
    """
    return (latents.float() + dt.to(velocity.dtype) * velocity).to(velocity.dtype)
