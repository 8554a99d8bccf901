"""PyTorch's scaled_dot_product_attention as omni kernels over ``[batch, seq, heads, head_dim]``.

``sdpa`` lets PyTorch pick a kernel; ``sdpa_cudnn``, ``sdpa_flash``, ``sdpa_efficient`` and
``sdpa_math`` pin one. ``sdpa_auto`` picks a kernel per call from the shapes alone
(:func:`choose_sdpa_kernel`: no tensor values, so it is free under ``torch.compile``): on CUDA,
cuDNN attention for long sequences (on H100/H200 it beat flash by ~25% on 75k-token video
self-attention), PyTorch's flash kernel for short ones, and the default choice whenever a mask is
given or the head dim does not fit the kernels. The crossover is ``OMNI_SDPA_AUTO_CUDNN_MIN_SEQ``
(query tokens, default 4096); the pipeline benchmark times both kernels on the real shapes.

These are kernels, not a plugin: the built-in attention plugins
(:mod:`omni_core.builtins.attention`, :mod:`omni_core.builtins.attention_extra`) register them,
the dispatcher falls back on :func:`sdpa` when no router is active, and platform plugins may call
:func:`sdpa` (``omni_core.runtime.sdpa``) for the shapes their own kernels do not take.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from omni_core.contract.registry import Availability

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


# --------------------------------------------------------------------------------- sdpa-auto
@functools.cache
def _cudnn_min_seq() -> int:
    return int(os.environ.get("OMNI_SDPA_AUTO_CUDNN_MIN_SEQ", "4096"))


@functools.cache
def _cuda_kernels() -> tuple[bool, bool]:
    import torch

    return (
        bool(torch.backends.cudnn.is_available()),
        bool(torch.backends.cuda.is_flash_attention_available()),
    )


def choose_sdpa_kernel(
    q_shape: tuple[int, ...],
    k_shape: tuple[int, ...],
    dtype: object,
    device_type: str,
    masked: bool,
) -> str:
    """``"cudnn"``, ``"flash"`` or ``"default"`` for a call with these [B, S, H, D] shapes."""
    import torch

    if device_type != "cuda" or masked or dtype not in (torch.bfloat16, torch.float16):
        return "default"
    head_dim = q_shape[-1]
    if head_dim % 8 or head_dim > 256:
        return "default"
    have_cudnn, have_flash = _cuda_kernels()
    long_sequence = q_shape[1] >= _cudnn_min_seq()
    if long_sequence and have_cudnn and head_dim <= 128:
        return "cudnn"
    if have_flash:
        return "flash"
    return "cudnn" if have_cudnn and head_dim <= 128 else "default"


def sdpa_auto(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """SDPA with the kernel chosen from the shapes (:func:`choose_sdpa_kernel`)."""
    kernel = choose_sdpa_kernel(
        tuple(q.shape), tuple(k.shape), q.dtype, q.device.type, attn_mask is not None
    )
    if kernel == "cudnn":
        return sdpa_cudnn(q, k, v, attn_mask=attn_mask, scale=scale)
    if kernel == "flash":
        return sdpa_flash(q, k, v, attn_mask=attn_mask, scale=scale)
    return sdpa(q, k, v, attn_mask=attn_mask, scale=scale)
