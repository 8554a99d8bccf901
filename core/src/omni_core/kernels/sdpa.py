"""PyTorch's scaled_dot_product_attention as omni kernels over ``[batch, seq, heads, head_dim]``.

``sdpa`` lets PyTorch pick a kernel; ``sdpa_cudnn``, ``sdpa_flash``, ``sdpa_efficient`` and
``sdpa_math`` pin one. These are kernels, not a plugin: the built-in attention plugin
(:mod:`omni_core.builtins.attention`) registers them, the dispatcher falls back on :func:`sdpa`
when no router is active, and platform plugins may call :func:`sdpa` (``omni_core.sdpa``) for
the shapes their own kernels do not take.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from omni_core.registry import Availability

if TYPE_CHECKING:  # pragma: no cover
    import torch


def sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """PyTorch SDPA with its own kernel choice."""
    import torch.nn.functional as F

    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=attn_mask, scale=scale
    )
    return out.transpose(1, 2)


def _pinned(kernel_name: str) -> Callable[..., torch.Tensor]:
    def run(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        attn_mask: torch.Tensor | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        from torch.nn.attention import sdpa_kernel

        with sdpa_kernel(_backend(kernel_name)):
            return sdpa(q, k, v, attn_mask=attn_mask, scale=scale)

    run.__name__ = f"sdpa_{kernel_name}"
    run.__doc__ = f"PyTorch SDPA pinned to the {kernel_name} kernel."
    return run


@functools.cache
def _backend(kernel_name: str) -> object:
    from torch.nn.attention import SDPBackend

    return {
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }[kernel_name]


sdpa_cudnn = _pinned("cudnn")
sdpa_flash = _pinned("flash")
sdpa_efficient = _pinned("efficient")
sdpa_math = _pinned("math")


def cudnn_available() -> Availability:
    import torch

    if not torch.backends.cudnn.is_available():
        return Availability.no("cuDNN is not available in this torch build")
    return Availability.yes()


def flash_available() -> Availability:
    import torch

    if not torch.backends.cuda.is_flash_attention_available():
        return Availability.no("this torch build has no flash attention kernel")
    return Availability.yes()
