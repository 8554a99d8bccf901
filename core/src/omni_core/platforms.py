"""Hardware platforms: what a device can do, and which platform this process runs on.

A platform plugin registers a :class:`~omni_core.registry.PlatformSpec` whose ``implementation``
is a :class:`Platform` subclass and whose ``detector`` is a cheap, side-effect-free check. The
highest-priority available platform wins; ``OMNI_PLATFORM=name`` forces one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from omni_core.errors import PlatformError
from omni_core.registry import Availability, PlatformSpec, Registry, load_object

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
        from omni_core.plugins import get_registry

        _CURRENT = select_platform(get_registry())
        _CURRENT.platform.apply_env_defaults()
    return _CURRENT.platform


def reset_platform() -> None:
    global _CURRENT
    _CURRENT = None
