"""omni plugin entry point of omni-platform-rocm.

Registers the ``rocm`` platform, two attention backends (``aiter``, ``flash-attn-ck``) and the
``fp8-rocm`` quantizer (fp8 in the GPU's own format).
Everything is a lazy ``"module:attr"`` string: this module imports no torch, so ``omni
list-plugins`` stays fast. fp8 support per GPU is data on the platform (``fp8_dtype``,
``quant_dtypes``, ``quant_dtype_for``): float8_e4m3fnuz on MI300, float8_e4m3fn on MI350.
"""

from __future__ import annotations

from collections.abc import Callable

from omni_core import (
    PLUGIN_API_VERSION,
    AttentionBackendSpec,
    PlatformSpec,
    QuantizerSpec,
    hookimpl,
)
from omni_platform_rocm.compat import COMPATIBILITY

OMNI_PLUGIN_API = PLUGIN_API_VERSION

#: Above the built-in cuda platform (100). The cuda detector already refuses HIP builds; the
#: higher priority makes the order explicit rather than an accident of that check.
PRIORITY = 110

_ATTENTION = "omni_platform_rocm.attention"


@hookimpl
def omni_register_platforms(register: Callable[[PlatformSpec], None]) -> None:
    register(
        PlatformSpec(
            name="rocm",
            implementation="omni_platform_rocm.platform:RocmPlatform",
            detector="omni_platform_rocm.detect:detect_rocm",
            device_type="cuda",
            priority=PRIORITY,
            compatibility=COMPATIBILITY,
            description="AMD GPUs through a ROCm (HIP) build of torch; RCCL for multi-GPU "
            "(torch.distributed backend name 'nccl').",
        )
    )


@hookimpl
def omni_register_attention_backends(register: Callable[[AttentionBackendSpec], None]) -> None:
    register(
        AttentionBackendSpec(
            name="aiter",
            implementation=f"{_ATTENTION}:aiter_attention",
            device_types=("cuda",),
            availability=f"{_ATTENTION}:aiter_available",
            supports_mask=False,
            priority=25,
            description="AMD aiter flash attention (ROCm); masked calls run on SDPA.",
        )
    )
    register(
        AttentionBackendSpec(
            name="flash-attn-ck",
            implementation=f"{_ATTENTION}:flash_attn_ck",
            device_types=("cuda",),
            availability=f"{_ATTENTION}:flash_attn_ck_available",
            supports_mask=False,
            priority=22,
            description="flash-attn's ROCm build (Composable Kernel); masked calls run on SDPA.",
        )
    )


@hookimpl
def omni_register_quantizers(register: Callable[[QuantizerSpec], None]) -> None:
    register(
        QuantizerSpec(
            name="fp8-rocm",
            implementation="omni_platform_rocm.quant:fp8_rocm",
            device_types=("cuda",),
            availability="omni_platform_rocm.quant:fp8_rocm_available",
            lossy=True,
            description="Row-wise fp8 linears in the GPU's format: float8_e4m3fnuz on MI300, "
            "float8_e4m3fn on MI350 (torch._scaled_mm on hipBLASLt).",
        )
    )
