"""The Ascend NPU platform: device ``npu``, HCCL, memory and synchronisation through ``torch.npu``.

``torch.npu`` exists only once ``torch_npu`` is imported (it registers the ``npu`` device type
with torch), so every method imports it first, lazily: selecting the platform never pays for it,
and the environment defaults are applied before the first import reads them.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from omni_core import ConfigError
from omni_core.runtime import Platform
from omni_platform_npu.compat import COMPATIBILITY, SYSTEM_REQUIREMENTS

if TYPE_CHECKING:  # pragma: no cover
    import torch


def npu_module() -> ModuleType:
    """``torch.npu``, importing ``torch_npu`` first (that import is what creates it)."""
    import torch
    import torch_npu  # noqa: F401 - registers torch.npu and the "npu" device type

    return torch.npu


class NpuPlatform(Platform):
    """Huawei Ascend NPUs (Atlas A2/A3) through torch_npu."""

    name: ClassVar[str] = "npu"
    device_type: ClassVar[str] = "npu"
    #: torch.distributed backend name (``init_process_group(backend="hccl")``); torch_npu
    #: registers it on import.
    dist_backend: ClassVar[str] = "hccl"
    preferred_attention_backends: ClassVar[tuple[str, ...]] = ("npu-fusion", "sdpa")
    #: Atlas A2/A3 cube units run fp16 and bf16; fp32 works (slower). No fp8 matmul on A2/A3.
    supported_dtypes: ClassVar[tuple[str, ...]] = ("bfloat16", "float16", "float32")
    #: The fp8 format native matmuls take here: none on Atlas A2/A3.
    fp8_dtype: ClassVar[str | None] = None
    #: Low-precision formats the hardware's matmuls accept (w8a8 / weight-only int8 through
    #: torch_npu's quant matmuls). This plugin registers no quantizer of its own: it states what a
    #: quantizer may target, and :meth:`quant_dtype_for` refuses what the chip cannot run.
    quant_dtypes: ClassVar[tuple[str, ...]] = ("int8",)
    #: Set only when this platform is selected (``setdefault``: the user's values win).
    env_defaults: ClassVar[dict[str, str]] = {
        # Video shapes vary per request: expandable segments keep the caching allocator from
        # fragmenting (read when torch_npu's allocator starts).
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
        # Level-2 task queue: operator dispatch pipelined off the Python thread.
        "TASK_QUEUE_ENABLE": "2",
        # Bind dispatch threads to the cores near each NPU.
        "CPU_AFFINITY_CONF": "1",
    }
    compatibility: ClassVar[dict[str, str]] = COMPATIBILITY
    system_requirements: ClassVar[dict[str, str]] = SYSTEM_REQUIREMENTS

    def device_count(self) -> int:
        return int(npu_module().device_count())

    def device(self, index: int = 0) -> torch.device:
        import torch

        npu_module()
        return torch.device("npu", index)

    def device_names(self) -> list[str]:
        npu = npu_module()
        return [str(npu.get_device_name(i)) for i in range(self.device_count())]

    def synchronize(self, device: Any = None) -> None:
        npu_module().synchronize(device)

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        npu = npu_module()
        return {
            "allocated_bytes": int(npu.memory_allocated(device)),
            "peak_allocated_bytes": int(npu.max_memory_allocated(device)),
        }

    def reset_peak_memory(self, device: Any = None) -> None:
        npu_module().reset_peak_memory_stats(device)

    def quant_dtype_for(self, requested: str) -> str:
        """The format a quantizer should use for ``requested`` here, or a ConfigError why not."""
        if requested in self.quant_dtypes:
            return requested
        if requested.startswith("float8"):
            raise ConfigError(
                f"quantization: {requested} is not supported on platform 'npu' (Atlas A2/A3 "
                "have no fp8 matmul); use int8 or run in bfloat16"
            )
        raise ConfigError(
            f"quantization: {requested} is not supported on platform 'npu'; supported: "
            + ", ".join(self.quant_dtypes)
        )

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info.update(
            fp8_dtype=self.fp8_dtype,
            quant_dtypes=list(self.quant_dtypes),
            env_defaults=dict(self.env_defaults),
            compatibility=dict(self.compatibility),
            system_requirements=dict(self.system_requirements),
        )
        return info
