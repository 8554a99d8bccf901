"""Built-in attention plugin: registers PyTorch's SDPA family
(:mod:`omni_core.runtime.kernels.sdpa`).

``sdpa`` lets PyTorch pick a kernel; ``sdpa-cudnn``, ``sdpa-flash``, ``sdpa-efficient`` and
``sdpa-math`` pin one. All take ``[batch, seq, heads, head_dim]`` like every omni backend.
"""

from __future__ import annotations

from collections.abc import Callable

from omni_core import PLUGIN_API_VERSION, AttentionBackendSpec, hookimpl

OMNI_PLUGIN_API = PLUGIN_API_VERSION


@hookimpl
def omni_register_attention_backends(register: Callable[[AttentionBackendSpec], None]) -> None:
    base = "omni_core.runtime.kernels.sdpa"
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
