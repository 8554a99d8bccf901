"""The npu detector: cheap (imports nothing), side-effect free, and says why not."""

from __future__ import annotations

import sys

import pytest

from omni_platform_npu import detect


def test_npu_not_available_without_torch_npu(no_torch_npu: None) -> None:
    availability = detect.detect_npu()
    assert not availability.available
    assert "torch_npu is not installed" in availability.reason


def test_npu_detected_without_importing_torch_npu(
    ascend_machine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    availability = detect.detect_npu()
    assert availability.available, availability.reason
    assert "2 Ascend NPU(s)" in availability.reason
    assert "torch_npu 2.13.0" in availability.reason
    # The stand-in package raises on import: detection succeeded, so it never imported it.
    assert "torch_npu" not in sys.modules


def test_npu_version_mismatch_is_reported(make_machine) -> None:
    make_machine(devices=1, torch_npu_version="2.5.1.post2")
    availability = detect.detect_npu()
    assert not availability.available
    assert "torch_npu 2.5.1.post2 is built for torch 2.5" in availability.reason


def test_npu_no_device_nodes(make_machine) -> None:
    make_machine(devices=0)
    availability = detect.detect_npu()
    assert not availability.available
    assert "davinci<N>" in availability.reason


@pytest.mark.parametrize(("visible", "expected"), [("", None), ("1", 1), ("0,1", 2), ("7", None)])
def test_npu_visible_devices_filter(
    ascend_machine, monkeypatch: pytest.MonkeyPatch, visible: str, expected: int | None
) -> None:
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", visible)
    availability = detect.detect_npu()
    if expected is None:
        assert not availability.available
        assert "ASCEND_RT_VISIBLE_DEVICES" in availability.reason
    else:
        assert availability.available
        assert f"{expected} Ascend NPU(s)" in availability.reason


def test_npu_cann_toolkit_missing(
    ascend_machine, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_OPP_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(detect, "DEFAULT_TOOLKIT", tmp_path / "no-such-toolkit")
    availability = detect.detect_npu()
    assert not availability.available
    assert "set_env.sh" in availability.reason


def test_npu_device_node_listing_ignores_manager(ascend_machine) -> None:
    (ascend_machine.dev / "davinci12").touch()
    assert detect.device_nodes() == [0, 1, 12]
