"""Fixtures for omni-platform-npu's contract tests: an isolated plugin host and stand-ins."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from omni_core.testing import PluginHost, isolated_host
from omni_platform_npu import detect
from omni_platform_npu.platform import NpuPlatform
from omni_platform_npu.testing import install_stand_in, make_ascend_host


@pytest.fixture
def npu_host() -> Iterator[PluginHost]:
    """Built-ins plus this plugin only (whatever else is installed never leaks in), the
    process-wide host for the test, with a fresh platform choice at its start and end."""
    with isolated_host() as host:
        info = host.load_module("omni-platform-npu", "omni_platform_npu.plugin")
        assert info.status == "ok", info.error
        yield host


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OMNI_PLATFORM and none of the platform's defaults set (restored after the test)."""
    monkeypatch.delenv("OMNI_PLATFORM", raising=False)
    for key in NpuPlatform.env_defaults:
        monkeypatch.delenv(key, raising=False)


@pytest.fixture
def no_torch_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without torch_npu (a None entry makes find_spec and import fail)."""
    monkeypatch.setitem(sys.modules, "torch_npu", None)


def _ascend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **kwargs: object) -> SimpleNamespace:
    dev, site = make_ascend_host(tmp_path, **kwargs)  # type: ignore[arg-type]
    monkeypatch.setattr(detect, "DEV_DIR", dev)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path / "ascend-toolkit"))
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    return SimpleNamespace(dev=dev, site=site)


@pytest.fixture
def ascend_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """Two Ascend device nodes, CANN set up and torch_npu installed (but never imported)."""
    return _ascend(tmp_path, monkeypatch, devices=2)


@pytest.fixture
def make_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Build an Ascend machine with other device counts / torch_npu versions."""
    return lambda **kwargs: _ascend(tmp_path, monkeypatch, **kwargs)


@pytest.fixture
def npu_runtime(ascend_machine: SimpleNamespace, monkeypatch: pytest.MonkeyPatch):
    """The Ascend machine plus importable stand-ins for torch_npu and torch.npu."""
    return install_stand_in(monkeypatch, devices=2)
