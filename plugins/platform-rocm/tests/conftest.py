"""Fixtures for omni-platform-rocm's contract tests: an isolated plugin host and stand-ins."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from omni_core.testing import PluginHost, isolated_host
from omni_platform_rocm import detect
from omni_platform_rocm.platform import RocmPlatform
from omni_platform_rocm.testing import StandInHipRuntime, install_hip_build, make_kfd_topology

VISIBILITY = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


@pytest.fixture
def rocm_host() -> Iterator[PluginHost]:
    """Built-ins plus this plugin only (whatever else is installed never leaks in), the
    process-wide host for the test, with a fresh platform choice at its start and end."""
    with isolated_host() as host:
        info = host.load_module("omni-platform-rocm", "omni_platform_rocm.plugin")
        assert info.status == "ok", info.error
        yield host


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OMNI_PLATFORM, no device filters, none of the platform's defaults (restored after)."""
    for key in ("OMNI_PLATFORM", *VISIBILITY, *RocmPlatform.env_defaults):
        monkeypatch.delenv(key, raising=False)


@pytest.fixture
def no_hip(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA or CPU build of torch (torch.version.hip is None)."""
    monkeypatch.setattr(torch.version, "hip", None, raising=False)


@pytest.fixture
def make_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_env: None):
    """Build a ROCm machine: KFD topology with the given archs and, by default, a HIP torch."""

    def build(
        archs: tuple[str, ...] = ("gfx942", "gfx942"), *, hip: str | None = "6.4.43482-0f2d60242"
    ) -> StandInHipRuntime | None:
        topology, kfd = make_kfd_topology(tmp_path, archs)
        monkeypatch.setattr(detect, "KFD_TOPOLOGY", topology)
        monkeypatch.setattr(detect, "DEV_KFD", kfd)
        if hip is None:
            monkeypatch.setattr(torch.version, "hip", None, raising=False)
            return None
        return install_hip_build(monkeypatch, hip=hip, devices=len(archs))

    return build


@pytest.fixture
def mi300(make_machine) -> StandInHipRuntime:
    """Two MI300X (gfx942) under ROCm 6.4."""
    return make_machine()
