"""The rocm detector: HIP build + KFD topology, no HIP runtime start, reasons when not."""

from __future__ import annotations

import pytest

from omni_platform_rocm import detect


def test_rocm_not_available_on_a_non_rocm_torch(no_hip: None) -> None:
    availability = detect.detect_rocm()
    assert not availability.available
    assert "not a ROCm build (torch.version.hip is None)" in availability.reason


def test_rocm_detected_without_starting_the_hip_runtime(mi300) -> None:
    availability = detect.detect_rocm()
    assert availability.available, availability.reason
    assert availability.reason == "ROCm 6.4.43482-0f2d60242, 2 AMD GPU(s) (gfx942)"
    assert mi300.runtime_queries == []  # sysfs only: torch.cuda was never asked


def test_rocm_gpu_present_but_torch_not_rocm(make_machine) -> None:
    make_machine(hip=None)
    assert "not a ROCm build" in detect.detect_rocm().reason


def test_rocm_without_dev_kfd(mi300, tmp_path) -> None:
    (tmp_path / "dev" / "kfd").unlink()
    availability = detect.detect_rocm()
    assert not availability.available
    assert "/dev/kfd" in availability.reason or "kfd is missing" in availability.reason


def test_rocm_no_gpu_nodes(make_machine) -> None:
    make_machine(archs=())
    availability = detect.detect_rocm()
    assert not availability.available
    assert "no AMD GPU in the KFD topology" in availability.reason


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"HIP_VISIBLE_DEVICES": ""}, None),
        ({"HIP_VISIBLE_DEVICES": "1"}, ["gfx942"]),
        ({"CUDA_VISIBLE_DEVICES": "0"}, ["gfx90a"]),
        ({"ROCR_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "0"}, ["gfx942"]),
        ({"HIP_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "0"}, ["gfx942"]),
        ({"ROCR_VISIBLE_DEVICES": "5"}, None),
    ],
)
def test_rocm_visible_devices(make_machine, monkeypatch, env, expected) -> None:
    make_machine(archs=("gfx90a", "gfx942"))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    availability = detect.detect_rocm()
    if expected is None:
        assert not availability.available
        assert "hidden by ROCR_VISIBLE_DEVICES" in availability.reason
    else:
        assert availability.available
        assert [g.arch for g in detect.visible_gpus()] == expected


@pytest.mark.parametrize(
    ("version", "arch"),
    [
        (90010, "gfx90a"),
        (90402, "gfx942"),
        (90500, "gfx950"),
        (110000, "gfx1100"),
        (120001, "gfx1201"),
    ],
)
def test_rocm_arch_names_from_gfx_target_version(version: int, arch: str) -> None:
    assert detect.GpuNode(1, version).arch == arch


def test_rocm_old_runtime_is_flagged(make_machine) -> None:
    make_machine(hip="5.7.31921-d1770ee1b")
    availability = detect.detect_rocm()
    assert availability.available
    assert "older than the supported 6.0" in availability.reason
