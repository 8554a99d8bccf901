"""omni-platform-npu keeps omni-core's own rules: omni-core through its faces only (its tests
and the stand-ins in ``testing``: the faces and the test kit), no import cycle, and ``testing``
reached from tests only."""

from __future__ import annotations

from pathlib import Path

from omni_core.testing import assert_package_imports_sound

ROOT = Path(__file__).resolve().parents[1]


def test_npu_package_imports_are_sound() -> None:
    assert_package_imports_sound(ROOT / "src" / "omni_platform_npu", tests=ROOT / "tests")
