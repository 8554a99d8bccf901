"""Hardware platforms: what a device can do, and which platform this process runs on.

A platform plugin registers a :class:`~omni_core.contract.registry.PlatformSpec` whose
``implementation`` is a :class:`Platform` subclass and whose ``detector`` is a cheap,
side-effect-free check. The highest-priority available platform wins; ``OMNI_PLATFORM=name`` forces
one.

:class:`CpuPlatform` and :class:`CudaPlatform` (with their detectors) live here so that platform
plugins can build on them (``omni_core.runtime.CudaPlatform``: a ROCm build of torch keeps CUDA's
names); the built-in plugin :mod:`omni_core.builtins.platforms` only registers them.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from omni_core.contract.errors import PlatformError
from omni_core.contract.registry import Availability, PlatformSpec, Registry, load_object

if TYPE_CHECKING:  # pragma: no cover
    import torch


class Platform:
    """Base class of a platform implementation. Subclasses override what differs."""

    name: ClassVar[str] = "base"
    device_type: ClassVar[str] = "cpu"
    dist_backend: ClassVar[str] = "gloo"
    #: Attention backends to try, best first, when the user asks for "auto".
    preferred_attention_backends: ClassVar[tuple[str, ...]] = ("sdpa",)
    supported_dtypes: ClassVar[tuple[str, ...]] = ("float32", "bfloat16", "float16")
    #: Environment defaults applied (with setdefault) when this platform is selected.
    env_defaults: ClassVar[dict[str, str]] = {}

    def device_count(self) -> int:
        return 1

    def device(self, index: int = 0) -> torch.device:
        import torch

        if self.device_type == "cpu":
            return torch.device("cpu")
        return torch.device(self.device_type, index)

    def synchronize(self, device: Any = None) -> None:
        """Wait for queued device work (used only outside hot loops: timings, benchmarks)."""

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        """Allocated / peak bytes; empty where the platform cannot tell."""
        return {}

    def reset_peak_memory(self, device: Any = None) -> None:
        """Reset the peak-memory counter before a measured region."""

    def free_memory_bytes(self, device: Any = None) -> int | None:
        """Free device memory in bytes (VAE tiling's ``auto``); None where it cannot tell."""
        return None

    def device_names(self) -> list[str]:
        return [self.device_type] * self.device_count()

    def apply_env_defaults(self) -> None:
        for key, value in self.env_defaults.items():
            os.environ.setdefault(key, value)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "device_type": self.device_type,
            "device_count": self.device_count(),
            "devices": self.device_names(),
            "dist_backend": self.dist_backend,
            "preferred_attention_backends": list(self.preferred_attention_backends),
            "supported_dtypes": list(self.supported_dtypes),
        }


class CpuPlatform(Platform):
    """Any CPU torch supports: the fallback when no accelerator is available."""

    name: ClassVar[str] = "cpu"
    device_type: ClassVar[str] = "cpu"
    dist_backend: ClassVar[str] = "gloo"
    preferred_attention_backends: ClassVar[tuple[str, ...]] = ("sdpa",)
    supported_dtypes: ClassVar[tuple[str, ...]] = ("float32", "bfloat16")

    def device_count(self) -> int:
        return 1


class CudaPlatform(Platform):
    """NVIDIA GPUs through ``torch.cuda`` (NCCL for multi-GPU)."""

    name: ClassVar[str] = "cuda"
    device_type: ClassVar[str] = "cuda"
    dist_backend: ClassVar[str] = "nccl"
    # cuDNN attention beat flash by ~25% on H200 for long video sequences; sdpa-auto does the rest.
    preferred_attention_backends: ClassVar[tuple[str, ...]] = ("sdpa-cudnn", "sdpa-flash", "sdpa")
    supported_dtypes: ClassVar[tuple[str, ...]] = (
        "bfloat16",
        "float16",
        "float32",
        "float8_e4m3fn",
    )

    def device_count(self) -> int:
        import torch

        return torch.cuda.device_count()

    def device_names(self) -> list[str]:
        import torch

        return [torch.cuda.get_device_name(i) for i in range(self.device_count())]

    def synchronize(self, device: Any = None) -> None:
        import torch

        torch.cuda.synchronize(device)

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        import torch

        return {
            "allocated_bytes": torch.cuda.memory_allocated(device),
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(device),
        }

    def reset_peak_memory(self, device: Any = None) -> None:
        import torch

        torch.cuda.reset_peak_memory_stats(device)

    def free_memory_bytes(self, device: Any = None) -> int | None:
        import torch

        free, _ = torch.cuda.mem_get_info(device)
        # Blocks torch's caching allocator holds but does not use are free to this process.
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


def detect_cpu() -> Availability:
    """The cpu platform's detector: available wherever torch is installed."""
    if importlib.util.find_spec("torch") is None:
        return Availability.no("torch is not installed (pip install 'omni-core[runtime]')")
    return Availability.yes("always available")


def detect_cuda() -> Availability:
    """The cuda platform's detector: a CUDA build of torch (not ROCm) that sees a device."""
    if importlib.util.find_spec("torch") is None:
        return Availability.no("torch is not installed")
    import torch

    if getattr(torch.version, "hip", None):
        return Availability.no("this torch is a ROCm (HIP) build; see omni-platform-rocm")
    if torch.version.cuda is None:
        return Availability.no("this torch build has no CUDA support (CPU-only build)")
    if not torch.cuda.is_available():
        return Availability.no("no CUDA device is visible")
    return Availability.yes(f"{torch.cuda.device_count()} CUDA device(s)")


def check_available(spec: PlatformSpec) -> Availability:
    """Run a platform's detector; a detector that raises counts as 'not available'."""
    try:
        result = load_object(spec.detector)()
    except Exception as exc:  # noqa: BLE001 - detectors must not take doctor down
        return Availability.no(f"detector failed: {type(exc).__name__}: {exc}")
    if isinstance(result, Availability):
        return result
    return Availability(available=bool(result), reason="" if result else "detector said no")


@dataclass(frozen=True)
class Selection:
    """The chosen platform and why."""

    spec: PlatformSpec
    platform: Platform
    reason: str


def select_platform(registry: Registry, forced: str | None = None) -> Selection:
    """Pick the platform: ``forced`` (or ``OMNI_PLATFORM``) or the best available one."""
    specs = registry.platforms
    forced = forced if forced is not None else os.environ.get("OMNI_PLATFORM") or None
    if forced:
        spec = specs.get(forced)
        if spec is None:
            known = ", ".join(sorted(specs)) or "none"
            raise PlatformError(f"unknown platform {forced!r} (OMNI_PLATFORM); registered: {known}")
        availability = check_available(spec)
        if not availability.available:
            raise PlatformError(
                f"platform {forced!r} was forced by OMNI_PLATFORM but is not available: "
                f"{availability.reason}"
            )
        return Selection(spec, _instantiate(spec), f"forced by OMNI_PLATFORM={forced}")
    ranked = sorted(specs.values(), key=lambda s: (-s.priority, s.name))
    skipped = []
    for spec in ranked:
        availability = check_available(spec)
        if availability.available:
            why = f"highest-priority available platform (priority {spec.priority})"
            if skipped:
                why += "; skipped " + "; ".join(skipped)
            return Selection(spec, _instantiate(spec), why)
        skipped.append(f"{spec.name}: {availability.reason}")
    raise PlatformError("no platform is available: " + "; ".join(skipped))


def _instantiate(spec: PlatformSpec) -> Platform:
    cls = spec.load()
    platform = cls() if isinstance(cls, type) else cls
    if not isinstance(platform, Platform):
        raise PlatformError(f"platform {spec.name!r}: {spec.implementation} is not a Platform")
    return platform


_CURRENT: Selection | None = None


def current_platform() -> Platform:
    """The platform of this process (selected once, on first use)."""
    global _CURRENT
    if _CURRENT is None:
        from omni_core.contract.host import get_registry

        _CURRENT = select_platform(get_registry())
        _CURRENT.platform.apply_env_defaults()
    return _CURRENT.platform


def reset_platform() -> None:
    global _CURRENT
    _CURRENT = None
