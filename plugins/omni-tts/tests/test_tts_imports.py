"""omni-tts keeps omni-core's own rules: omni-core through its faces only (its tests and
``testing``: the faces and the test kit), no import cycle, and the tiny builders in ``testing``
reached from tests and the benchmark workloads only (they build their checkpoints with them)."""

from __future__ import annotations

from pathlib import Path

from omni_core.testing import assert_package_imports_sound

ROOT = Path(__file__).resolve().parents[1]


def test_tts_package_imports_are_sound() -> None:
    assert_package_imports_sound(
        ROOT / "src" / "omni_tts", tests=ROOT / "tests", testing_users=("bench",)
    )
