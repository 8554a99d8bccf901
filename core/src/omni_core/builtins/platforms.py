"""Built-in platforms plugin: registers cpu (always there) and cuda (NVIDIA through torch.cuda).

The implementations and detectors are :class:`omni_core.contract.platforms.CpuPlatform` /
:class:`omni_core.contract.platforms.CudaPlatform`; this module only registers them, as any platform
plugin would.
"""

from __future__ import annotations

from collections.abc import Callable

from omni_core import PLUGIN_API_VERSION, PlatformSpec, hookimpl

OMNI_PLUGIN_API = PLUGIN_API_VERSION

_BASE = "omni_core.contract.platforms"


@hookimpl
def omni_register_platforms(register: Callable[[PlatformSpec], None]) -> None:
    register(
        PlatformSpec(
            name="cpu",
            implementation=f"{_BASE}:CpuPlatform",
            detector=f"{_BASE}:detect_cpu",
            device_type="cpu",
            priority=0,
            description="Any CPU torch supports; the fallback.",
            compatibility={"torch": ">=2.4"},
        )
    )
    register(
        PlatformSpec(
            name="cuda",
            implementation=f"{_BASE}:CudaPlatform",
            detector=f"{_BASE}:detect_cuda",
            device_type="cuda",
            priority=100,
            description="NVIDIA GPUs through torch.cuda (NCCL for multi-GPU).",
            compatibility={"torch": ">=2.4"},
        )
    )
