"""Attention kernels from optional third-party packages: flash-attn (FA2), FA3 and SageAttention.

All take omni's ``[batch, seq, heads, head_dim]`` layout. None of the packages is a dependency:
each ``*_available`` check says "not installed" (or why the device cannot run it) instead of
failing, so ``omni doctor`` and ``omni list-plugins`` stay up. They take no masks: a masked call
falls back to :func:`omni_core.runtime.kernels.sdpa.sdpa`. The built-in plugin
:mod:`omni_core.builtins.attention_extra` registers them.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from omni_core.contract.registry import Availability
from omni_core.runtime.kernels.sdpa import sdpa

if TYPE_CHECKING:  # pragma: no cover
    import torch


def flash_attn2(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """flash-attn 2 (``flash_attn.flash_attn_func``) on [B, S, H, D]; masked calls use SDPA."""
    if attn_mask is not None:
        return sdpa(q, k, v, attn_mask=attn_mask, scale=scale)
    from flash_attn import flash_attn_func  # type: ignore[import-not-found]

    return flash_attn_func(q, k, v, softmax_scale=scale)


def flash_attn3(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """FlashAttention-3 (Hopper, ``flash_attn_interface``) on [B, S, H, D]; masked: SDPA."""
    if attn_mask is not None:
        return sdpa(q, k, v, attn_mask=attn_mask, scale=scale)
    from flash_attn_interface import flash_attn_func  # type: ignore[import-not-found]

    out = flash_attn_func(q, k, v, softmax_scale=scale)
    return out[0] if isinstance(out, tuple) else out


def sage_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """SageAttention (int8 QK, fp16/fp8 PV: lossy) on [B, S, H, D]; masked calls use SDPA."""
    if attn_mask is not None:
        return sdpa(q, k, v, attn_mask=attn_mask, scale=scale)
    from sageattention import sageattn  # type: ignore[import-not-found]

    kwargs = {} if scale is None else {"sm_scale": scale}
    return sageattn(q, k, v, tensor_layout="NHD", is_causal=False, **kwargs)


def _needs(module: str, pip_name: str, *, cuda: bool = True) -> Availability:
    if importlib.util.find_spec(module) is None:
        return Availability.no(f"{pip_name} not installed")
    if cuda:
        import torch

        if not torch.cuda.is_available():
            return Availability.no("needs a CUDA device")
    return Availability.yes()


def flash_attn2_available() -> Availability:
    return _needs("flash_attn", "flash-attn")


def flash_attn3_available() -> Availability:
    have = _needs("flash_attn_interface", "flash-attn 3 (flash_attn_interface)")
    if not have.available:
        return have
    import torch

    if torch.cuda.get_device_capability()[0] != 9:
        return Availability.no("FlashAttention-3 runs on Hopper (sm90) only")
    return have


def sage_available() -> Availability:
    return _needs("sageattention", "sageattention")
