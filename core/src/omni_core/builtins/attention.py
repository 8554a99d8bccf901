"""Built-in attention backends: PyTorch's scaled_dot_product_attention family.

``sdpa`` lets PyTorch pick a kernel; ``sdpa-cudnn``, ``sdpa-flash``, ``sdpa-efficient`` and
``sdpa-math`` pin one. All take ``[batch, seq, heads, head_dim]`` like every omni backend.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.registry import AttentionBackendSpec, Availability

if TYPE_CHECKING:  # pragma: no cover
    import torch

OMNI_PLUGIN_API = PLUGIN_API_VERSION


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


@hookimpl
def omni_register_attention_backends(register: Callable[[AttentionBackendSpec], None]) -> None:
    base = "omni_core.builtins.attention"
    register(
        AttentionBackendSpec(
            name="sdpa",
            implementation=f"{base}:sdpa",
            device_types=("cpu", "cuda", "npu"),
            priority=0,
            description="torch SDPA, kernel chosen by PyTorch.",
        )
    )
    register(
        AttentionBackendSpec(
            name="sdpa-math",
            implementation=f"{base}:sdpa_math",
            device_types=("cpu", "cuda", "npu"),
            priority=-10,
            description="torch SDPA reference (math) kernel: slow, exact.",
        )
    )
    register(
        AttentionBackendSpec(
            name="sdpa-cudnn",
            implementation=f"{base}:sdpa_cudnn",
            device_types=("cuda",),
            availability=f"{base}:cudnn_available",
            priority=20,
            description="torch SDPA on cuDNN attention (fastest on H100/H200 for long sequences).",
        )
    )
    register(
        AttentionBackendSpec(
            name="sdpa-flash",
            implementation=f"{base}:sdpa_flash",
            device_types=("cuda",),
            availability=f"{base}:flash_available",
            supports_mask=False,
            priority=10,
            description="torch SDPA on its built-in FlashAttention-2 kernel.",
        )
    )
    register(
        AttentionBackendSpec(
            name="sdpa-efficient",
            implementation=f"{base}:sdpa_efficient",
            device_types=("cuda",),
            priority=5,
            description="torch SDPA on the memory-efficient (xformers-style) kernel.",
        )
    )
