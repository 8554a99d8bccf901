"""More attention backends: shape-aware SDPA, flash-attn (FA2/FA3) and SageAttention.

``sdpa-auto`` picks a PyTorch SDPA kernel per call from the shapes alone (no tensor values, so it
is free under ``torch.compile``): on CUDA, cuDNN attention for long sequences (on H100/H200 it beat
flash by ~25% on Wan's 75k-token self-attention), PyTorch's flash kernel for short ones, and the
default choice whenever a mask is given or the head dim does not fit the kernels. The crossover
is ``OMNI_SDPA_AUTO_CUDNN_MIN_SEQ`` (query tokens, default 4096); ``omni bench pipeline`` times both
kernels on the real shapes.

flash-attn, FA3 (``flash_attn_interface``) and SageAttention are optional installs; their
availability checks say "not installed" instead of failing. They take no masks: a masked call
falls back to SDPA.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.kernels.sdpa import sdpa, sdpa_cudnn, sdpa_flash
from omni_core.registry import AttentionBackendSpec, Availability

if TYPE_CHECKING:  # pragma: no cover
    import torch

OMNI_PLUGIN_API = PLUGIN_API_VERSION


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
    """SDPA with the kernel chosen from the shapes (see the module docstring)."""
    kernel = choose_sdpa_kernel(
        tuple(q.shape), tuple(k.shape), q.dtype, q.device.type, attn_mask is not None
    )
    if kernel == "cudnn":
        return sdpa_cudnn(q, k, v, attn_mask=attn_mask, scale=scale)
    if kernel == "flash":
        return sdpa_flash(q, k, v, attn_mask=attn_mask, scale=scale)
    return sdpa(q, k, v, attn_mask=attn_mask, scale=scale)


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


@hookimpl
def omni_register_attention_backends(register: Callable[[AttentionBackendSpec], None]) -> None:
    base = "omni_core.builtins.attention_extra"
    register(
        AttentionBackendSpec(
            name="sdpa-auto",
            implementation=f"{base}:sdpa_auto",
            device_types=("cpu", "cuda"),
            priority=25,
            description="torch SDPA with the kernel picked per call from the shapes: cuDNN for "
            "long sequences, flash for short ones (CUDA); PyTorch's choice elsewhere.",
        )
    )
    register(
        AttentionBackendSpec(
            name="flash-attn",
            implementation=f"{base}:flash_attn2",
            device_types=("cuda",),
            availability=f"{base}:flash_attn2_available",
            supports_mask=False,
            priority=15,
            description="flash-attn 2 (Dao-AILab); masked calls fall back to SDPA.",
        )
    )
    register(
        AttentionBackendSpec(
            name="flash-attn3",
            implementation=f"{base}:flash_attn3",
            device_types=("cuda",),
            availability=f"{base}:flash_attn3_available",
            supports_mask=False,
            priority=30,
            description="FlashAttention-3 for Hopper; masked calls fall back to SDPA.",
        )
    )
    register(
        AttentionBackendSpec(
            name="sage",
            implementation=f"{base}:sage_attention",
            device_types=("cuda",),
            availability=f"{base}:sage_available",
            supports_mask=False,
            priority=-5,
            description="SageAttention (quantized, lossy): opt-in only; masked calls use SDPA.",
        )
    )
