"""pytest fixtures for omni plugin authors (loaded through the ``pytest11`` entry point).

- ``omni_host``: an isolated plugin host (autoload off, built-ins on; the developer's installed
  plugins never leak in), installed as the process-wide host for the test and restored after.
- ``register_omni_plugin``: ``register_omni_plugin(obj_or_module, name=None, strict=True)``
  registers a throwaway plugin into ``omni_host`` and returns the resulting registry.
- ``assert_omni_plugin_discoverable``: :func:`omni_core.testing.assert_plugin_discoverable`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from omni_core.plugins import PluginHost
from omni_core.registry import Registry
from omni_core.testing import assert_plugin_discoverable, isolated_host, register_plugin


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
