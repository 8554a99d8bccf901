"""ROCm attention backends: AMD's aiter kernels and the Composable Kernel build of flash-attn.

Both take omni's ``[batch, seq, heads, head_dim]`` layout as is (``flash_attn_func``'s
convention), fp16/bf16 only and no attention mask. Calls those kernels cannot take (a mask,
float32, head size above 256 or not a multiple of 8) run through torch SDPA instead; the choice
looks at dtypes and shapes only, never at values, so it costs no host sync.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from omni_core import Availability

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: Largest head size the CK / aiter forward kernels are built for.
MAX_HEAD_DIM = 256
KERNEL_DTYPES = ("float16", "bfloat16")


def kernel_accepts(q: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor | None) -> bool:
    """Whether a flash-style ROCm kernel can take this call (metadata checks only)."""
    head_dim = q.shape[-1]
    return (
        attn_mask is None
        and str(q.dtype).removeprefix("torch.") in KERNEL_DTYPES
        and head_dim <= MAX_HEAD_DIM
        and head_dim % 8 == 0
        and q.shape[2] % k.shape[2] == 0
    )


def _sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None,
    scale: float | None,
) -> torch.Tensor:
    from omni_core.runtime import sdpa

    return sdpa(q, k, v, attn_mask=attn_mask, scale=scale)


def aiter_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention over ``[B, S, H, D]`` on ``aiter.flash_attn_func`` (SDPA where it cannot run)."""
    if not kernel_accepts(q, k, attn_mask):
        return _sdpa(q, k, v, attn_mask, scale)
    import aiter

    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    out = aiter.flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=scale, causal=False)
    return out[0] if isinstance(out, tuple) else out


def flash_attn_ck(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention over ``[B, S, H, D]`` on flash-attn's ROCm (CK) build (SDPA where it cannot)."""
    if not kernel_accepts(q, k, attn_mask):
        return _sdpa(q, k, v, attn_mask, scale)
    import flash_attn

    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    out = flash_attn.flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=scale, causal=False)
    return out[0] if isinstance(out, tuple) else out


def _needs_hip() -> Availability | None:
    from omni_platform_rocm.detect import hip_version

    if hip_version() is None:
        return Availability.no("needs a ROCm (HIP) build of torch")
    return None


def _importable(module: str, attr: str, install_hint: str) -> Availability:
    if importlib.util.find_spec(module) is None:
        return Availability.no(f"{module} is not installed ({install_hint})")
    try:
        imported = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - a broken extension build must not take doctor down
        return Availability.no(f"import {module} failed: {type(exc).__name__}: {exc}")
    if not hasattr(imported, attr):
        return Availability.no(f"{module} has no {attr}")
    return Availability.yes(f"{module}.{attr}")


def aiter_available() -> Availability:
    """``aiter`` usable: a HIP torch and an importable aiter with ``flash_attn_func``."""
    return _needs_hip() or _importable(
        "aiter", "flash_attn_func", "AMD's AI Tensor Engine, built from ROCm/aiter"
    )


def flash_attn_ck_available() -> Availability:
    """``flash-attn-ck`` usable: a HIP torch and flash-attn built for ROCm."""
    return _needs_hip() or _importable(
        "flash_attn", "flash_attn_func", "flash-attn built for ROCm (Composable Kernel backend)"
    )
