"""pytest fixtures for omni plugin authors (loaded through the ``pytest11`` entry point).

- ``omni_host``: an isolated plugin host (autoload off, built-ins on; the developer's installed
  plugins never leak in), installed as the process-wide host for the test and restored after.
- ``register_omni_plugin``: ``register_omni_plugin(obj_or_module, name=None, strict=True)``
  registers a throwaway plugin into ``omni_host`` and returns the resulting registry.
- ``assert_omni_plugin_discoverable``: :func:`omni_core.testing.assert_plugin_discoverable`.
- ``omni_temp_distribution``: write a throwaway installed distribution with an ``omni`` entry
  point into a temp dir on ``sys.path`` (see :func:`omni_core.testing.write_distribution`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from omni_core.contract.host import PluginHost
from omni_core.contract.registry import Registry
from omni_core.testing import (
    assert_plugin_discoverable,
    isolated_host,
    register_plugin,
    write_distribution,
)


@pytest.fixture
def omni_host() -> Iterator[PluginHost]:
    """An isolated plugin host, made the process-wide one (``get_host()``) for this test."""
    with isolated_host() as host:
        yield host


@pytest.fixture
def register_omni_plugin(omni_host: PluginHost) -> Callable[..., Registry]:
    """Register a throwaway plugin object or module into ``omni_host``; returns the registry."""

    def register(plugin: Any, name: str | None = None, *, strict: bool = True) -> Registry:
        return register_plugin(omni_host, plugin, name, strict=strict)

    return register


@pytest.fixture
def assert_omni_plugin_discoverable() -> Callable[[str], Registry]:
    """Assert an installed plugin package is discoverable and its specs validate."""
    return assert_plugin_discoverable


@pytest.fixture
def omni_temp_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Path]]:
    """``make(dist, modules, entry_points=None, version="0.1.0")`` -> the dist-info path.

    The temp dir is put on ``sys.path`` for this test; modules it defined are unloaded after.
    """
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    written: list[str] = []

    def make(dist: str, modules: dict[str, str], **kwargs: Any) -> Path:
        written.extend(m.split(".")[0] for m in modules)
        return write_distribution(root, dist, modules, **kwargs)

    yield make
    for name in written:
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            sys.modules.pop(loaded, None)
