"""Built-in plugin of more attention backends: shape-aware SDPA, flash-attn (FA2/FA3), Sage.

The kernels are :func:`omni_core.runtime.kernels.sdpa.sdpa_auto` (the kernel picked per call from
the shapes) and :mod:`omni_core.runtime.kernels.external` (optional third-party packages whose
availability checks say "not installed" instead of failing); this module only registers them.
"""

from __future__ import annotations

from collections.abc import Callable

from omni_core import PLUGIN_API_VERSION, AttentionBackendSpec, hookimpl

OMNI_PLUGIN_API = PLUGIN_API_VERSION


@hookimpl
def omni_register_attention_backends(register: Callable[[AttentionBackendSpec], None]) -> None:
    external = "omni_core.runtime.kernels.external"
    register(
        AttentionBackendSpec(
            name="sdpa-auto",
            implementation="omni_core.runtime.kernels.sdpa:sdpa_auto",
            device_types=("cpu", "cuda"),
            priority=25,
            description="torch SDPA with the kernel picked per call from the shapes: cuDNN for "
            "long sequences, flash for short ones (CUDA); PyTorch's choice elsewhere.",
        )
    )
    register(
        AttentionBackendSpec(
            name="flash-attn",
            implementation=f"{external}:flash_attn2",
            device_types=("cuda",),
            availability=f"{external}:flash_attn2_available",
            supports_mask=False,
            priority=15,
            description="flash-attn 2 (Dao-AILab); masked calls fall back to SDPA.",
        )
    )
    register(
        AttentionBackendSpec(
            name="flash-attn3",
            implementation=f"{external}:flash_attn3",
            device_types=("cuda",),
            availability=f"{external}:flash_attn3_available",
            supports_mask=False,
            priority=30,
            description="FlashAttention-3 for Hopper; masked calls fall back to SDPA.",
        )
    )
    register(
        AttentionBackendSpec(
            name="sage",
            implementation=f"{external}:sage_attention",
            device_types=("cuda",),
            availability=f"{external}:sage_available",
            supports_mask=False,
            priority=-5,
            lossy=True,
            precision="int8",
            description="SageAttention (quantized, lossy): opt-in only; masked calls use SDPA.",
        )
    )
