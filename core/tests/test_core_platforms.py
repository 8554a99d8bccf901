"""Platform selection: priority, detectors, OMNI_PLATFORM, and the built-in cpu platform."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from omni_core import hookimpl
from omni_core.contract.errors import PlatformError
from omni_core.contract.host import PluginHost
from omni_core.contract.platforms import check_available, current_platform, select_platform
from omni_core.contract.registry import PlatformSpec, Registry

FAKES = """
from omni_core.contract.platforms import Platform
from omni_core.contract.registry import Availability

class Fast(Platform):
    name = "fast"
    device_type = "cpu"

class NotAPlatform:
    pass

def yes():
    return Availability.yes("found 8 fast devices")

def no():
    return Availability.no("driver 1.2 is too old")

def raises():
    raise OSError("cannot open /dev/fast0")

def truthy():
    return 1
"""


@pytest.fixture
def fakes(omni_temp_distribution: Callable[..., Path]) -> Iterator[str]:
    """A module of fake platforms/detectors on sys.path (real "module:attr" references)."""
    omni_temp_distribution("omni-test-fakes", {"omni_test_fake_platforms": FAKES})
    yield "omni_test_fake_platforms"


def _spec(fakes: str, name: str, detector: str, priority: int, impl: str = "Fast") -> PlatformSpec:
    return PlatformSpec(
        name=name,
        implementation=f"{fakes}:{impl}",
        detector=f"{fakes}:{detector}",
        device_type="cpu",
        priority=priority,
    )


def _registry(*specs: PlatformSpec) -> Registry:
    registry = Registry()
    for spec in specs:
        registry.add(spec, "test")
    return registry


def test_highest_priority_available_platform_wins_and_says_why(
    fakes: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMNI_PLATFORM", raising=False)
    registry = _registry(
        _spec(fakes, "best-but-absent", "no", 200),
        _spec(fakes, "fast", "yes", 100),
        _spec(fakes, "slow", "yes", 1),
    )
    selection = select_platform(registry)
    assert selection.spec.name == "fast"
    assert type(selection.platform).__name__ == "Fast"
    assert "priority 100" in selection.reason
    assert "best-but-absent: driver 1.2 is too old" in selection.reason


def test_detector_that_raises_or_returns_a_bool(fakes: str) -> None:
    raising = check_available(_spec(fakes, "r", "raises", 0))
    assert not raising.available and "OSError: cannot open /dev/fast0" in raising.reason
    assert check_available(_spec(fakes, "t", "truthy", 0)).available


def test_forced_platform_unknown_unavailable_and_ok(
    fakes: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = _registry(_spec(fakes, "fast", "yes", 100), _spec(fakes, "absent", "no", 200))
    monkeypatch.setenv("OMNI_PLATFORM", "tpu")
    with pytest.raises(PlatformError) as excinfo:
        select_platform(registry)
    assert str(excinfo.value) == "unknown platform 'tpu' (OMNI_PLATFORM); registered: absent, fast"
    monkeypatch.setenv("OMNI_PLATFORM", "absent")
    with pytest.raises(PlatformError, match="forced by OMNI_PLATFORM but is not available: driver"):
        select_platform(registry)
    monkeypatch.setenv("OMNI_PLATFORM", "fast")
    assert "forced by OMNI_PLATFORM=fast" in select_platform(registry).reason


def test_no_platform_available_and_a_bad_implementation(fakes: str) -> None:
    with pytest.raises(PlatformError, match="no platform is available: gone: driver"):
        select_platform(_registry(_spec(fakes, "gone", "no", 0)), forced="")
    with pytest.raises(PlatformError, match="is not a Platform"):
        select_platform(_registry(_spec(fakes, "odd", "yes", 0, impl="NotAPlatform")), forced="")


def test_builtin_cpu_is_selected_here_through_the_process_host(
    omni_host: PluginHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMNI_PLATFORM", raising=False)
    platform = current_platform()
    assert platform.name == "cpu"
    description = platform.describe()
    assert description["device_type"] == "cpu" and description["device_count"] == 1
    assert description["dist_backend"] == "gloo"
    assert platform.memory_stats() == {}
    cuda = omni_host.registry.platforms["cuda"]
    availability = check_available(cuda)
    assert not availability.available and "CUDA" in availability.reason


def test_platform_from_a_plugin_takes_part_in_selection(
    fakes: str, register_omni_plugin: Callable[..., Registry], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMNI_PLATFORM", raising=False)

    class FastPlugin:
        @hookimpl
        def omni_register_platforms(self, register: Callable[[PlatformSpec], None]) -> None:
            register(_spec(fakes, "fast", "yes", 500))

    registry = register_omni_plugin(FastPlugin(), "fast-plugin")
    assert registry.platforms["fast"].plugin == "fast-plugin"
    assert current_platform().name == "fast"
