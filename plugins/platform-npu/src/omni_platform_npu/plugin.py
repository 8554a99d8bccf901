"""omni plugin entry point of omni-platform-npu.

Registers the ``npu`` platform and the ``npu-fusion`` attention backend. Everything is a lazy
``"module:attr"`` string: this module imports neither torch nor torch_npu, so ``omni
list-plugins`` stays fast. No quantizer is registered: the platform states as data
(``NpuPlatform.quant_dtypes``, ``fp8_dtype``) what a quantizer may target here.
"""

from __future__ import annotations

from collections.abc import Callable

from omni_core import PLUGIN_API_VERSION, AttentionBackendSpec, PlatformSpec, hookimpl
from omni_platform_npu.compat import COMPATIBILITY

OMNI_PLUGIN_API = PLUGIN_API_VERSION

#: Above the built-in cuda (100): installing this plugin says you want the NPU. A host with both
#: kinds of device picks with OMNI_PLATFORM.
PRIORITY = 120


@hookimpl
def omni_register_platforms(register: Callable[[PlatformSpec], None]) -> None:
    register(
        PlatformSpec(
            name="npu",
            implementation="omni_platform_npu.platform:NpuPlatform",
            detector="omni_platform_npu.detect:detect_npu",
            device_type="npu",
            priority=PRIORITY,
            compatibility=COMPATIBILITY,
            description="Huawei Ascend NPUs through torch_npu (HCCL for multi-device).",
        )
    )


@hookimpl
def omni_register_attention_backends(register: Callable[[AttentionBackendSpec], None]) -> None:
    register(
        AttentionBackendSpec(
            name="npu-fusion",
            implementation="omni_platform_npu.attention:npu_fusion",
            device_types=("npu",),
            availability="omni_platform_npu.attention:fusion_available",
            supports_mask=True,
            priority=30,
            description="torch_npu.npu_fusion_attention (BSND layout; bool and additive masks).",
        )
    )
