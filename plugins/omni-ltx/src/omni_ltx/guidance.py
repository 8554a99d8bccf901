"""LTX-2's guidance, one request's step, as diffusers' ``LTX2Pipeline.__call__`` computes it.

Each guidance term is a delta between x0 predictions (``x0 = latents - v * sigma``): CFG
``(s - 1) * (cond - uncond)``, spatio-temporal guidance ``s * (cond - perturbed)`` and
modality-isolation guidance ``(s - 1) * (cond - isolated)``; their sum on the conditional
x0 is rescaled toward its spread (``rescale_noise_cfg``), turned back into a velocity and
taken as one Euler step, all in float32. Video and audio each have their own scales.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Scales:
    """One modality's guidance scales, resolved as diffusers resolves them."""

    cfg: float
    stg: float
    modality: float
    rescale: float


@dataclass
class Predictions:
    """One modality's predicted velocities for one request at one step (float32)."""

    cond: torch.Tensor
    uncond: torch.Tensor | None = None
    perturbed: torch.Tensor | None = None
    isolated: torch.Tensor | None = None


def guided_step(
    latents: torch.Tensor, pred: Predictions, scales: Scales, sigma: torch.Tensor, dt: torch.Tensor
) -> torch.Tensor:
    """The next latents (float32) after one guided Euler step from ``latents``."""

    def x0(velocity: torch.Tensor) -> torch.Tensor:
        return latents - velocity * sigma

    cond = x0(pred.cond)
    guided = cond
    if pred.uncond is not None:
        guided = guided + (scales.cfg - 1) * (cond - x0(pred.uncond))
    if pred.perturbed is not None:
        guided = guided + scales.stg * (cond - x0(pred.perturbed))
    if pred.isolated is not None:
        guided = guided + (scales.modality - 1) * (cond - x0(pred.isolated))
    if scales.rescale > 0:
        from diffusers.pipelines.ltx2.pipeline_ltx2 import rescale_noise_cfg

        guided = rescale_noise_cfg(guided, cond, guidance_rescale=scales.rescale)
    velocity = (latents - guided) / sigma
    return (latents.to(torch.float32) + dt * velocity).to(velocity.dtype)
