"""The ROCm platform: AMD GPUs through a HIP build of torch (device type ``cuda``, RCCL).

Under ROCm, torch keeps CUDA's names: tensors live on ``torch.device("cuda")``, ``torch.cuda``
answers for the GPUs, and ``torch.distributed`` calls RCCL ``"nccl"``. So the platform reuses the
built-in CUDA implementation and changes what differs: attention preferences, environment
defaults, fp8 formats.
"""

from __future__ import annotations

from typing import Any, ClassVar

from omni_core import ConfigError
from omni_core.runtime import CudaPlatform
from omni_platform_rocm import detect
from omni_platform_rocm.compat import COMPATIBILITY, SYSTEM_REQUIREMENTS
from omni_platform_rocm.fp8 import fp8_formats, platform_fp8


class RocmPlatform(CudaPlatform):
    """AMD Instinct / Radeon GPUs under ROCm."""

    name: ClassVar[str] = "rocm"
    device_type: ClassVar[str] = "cuda"
    #: The name torch.distributed needs: ``init_process_group(backend="nccl")`` runs RCCL on a
    #: ROCm build (torch has no backend called "rccl").
    dist_backend: ClassVar[str] = "nccl"
    #: The collective library that actually runs (for people reading ``omni doctor``).
    collective_library: ClassVar[str] = "rccl"
    preferred_attention_backends: ClassVar[tuple[str, ...]] = ("aiter", "flash-attn-ck", "sdpa")
    #: Set only when this platform is selected (``setdefault``: the user's values win).
    env_defaults: ClassVar[dict[str, str]] = {
        # MIOpen's exhaustive kernel search costs seconds per new conv shape (VAE decodes of new
        # resolutions); FAST picks from its database and heuristics.
        "MIOPEN_FIND_MODE": "FAST",
        # Kernel arguments in device memory: lower launch latency on MI300 (read when the HIP
        # runtime starts, which is why detection never starts it).
        "HIP_FORCE_DEV_KERNARG": "1",
        # GEMMs through hipBLASLt (faster than rocBLAS for transformer shapes on MI300).
        "TORCH_BLAS_PREFER_HIPBLASLT": "1",
    }
    compatibility: ClassVar[dict[str, str]] = COMPATIBILITY
    system_requirements: ClassVar[dict[str, str]] = SYSTEM_REQUIREMENTS
    #: Low-precision formats besides fp8 that the matrix cores take.
    base_quant_dtypes: ClassVar[tuple[str, ...]] = ("int8",)

    def __init__(self) -> None:
        gpus = detect.visible_gpus()
        #: LLVM target of the first visible GPU (gfx942 on MI300), read from sysfs.
        self.gfx_arch: str | None = gpus[0].arch if gpus else None
        formats = fp8_formats(self.gfx_arch)
        #: The fp8 format this GPU's matmuls take (float8_e4m3fnuz on MI300), or None.
        self.fp8_dtype: str | None = formats[0] if formats else None
        self.supported_dtypes = ("bfloat16", "float16", "float32", *(formats or ()))
        self.quant_dtypes: tuple[str, ...] = (*(formats or ()), *self.base_quant_dtypes)

    def quant_dtype_for(self, requested: str) -> str:
        """The format a quantizer must use for ``requested`` here (e4m3fn -> e4m3fnuz on MI300)."""
        if requested in self.base_quant_dtypes:
            return requested
        if requested.startswith("float8"):
            target = platform_fp8(requested, self.gfx_arch)
            if target is None:
                gpu = self.gfx_arch or "this GPU"
                raise ConfigError(
                    f"quantization: {requested} needs fp8 matrix cores; {gpu} has none "
                    "(fp8 needs MI300 / gfx942 or newer)"
                )
            return target
        raise ConfigError(
            f"quantization: {requested} is not supported on platform 'rocm'; supported: "
            + ", ".join(self.quant_dtypes)
        )

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info.update(
            gfx_arch=self.gfx_arch,
            hip_version=detect.hip_version(),
            collective_library=self.collective_library,
            fp8_dtype=self.fp8_dtype,
            quant_dtypes=list(self.quant_dtypes),
            env_defaults=dict(self.env_defaults),
            compatibility=dict(self.compatibility),
            system_requirements=dict(self.system_requirements),
        )
        return info
