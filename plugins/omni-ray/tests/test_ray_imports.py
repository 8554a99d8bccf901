"""omni-ray keeps omni-core's own rules: omni-core through its faces only (its tests: the
faces and the test kit) and no import cycle. Runs without ray: the sources are read, not
imported."""

from __future__ import annotations

from pathlib import Path

from omni_core.testing import assert_package_imports_sound

ROOT = Path(__file__).resolve().parents[1]


def test_ray_package_imports_are_sound() -> None:
    assert_package_imports_sound(ROOT / "src" / "omni_ray", tests=ROOT / "tests")
