"""Fixtures of omni-attention-fp8's tests: a host with the built-ins and this plugin only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from omni_core.testing import PluginHost, isolated_host


@pytest.fixture
def fp8_host() -> Iterator[PluginHost]:
    """Built-ins plus omni-attention-fp8 (nothing else installed leaks in), process-wide."""
    with isolated_host() as host:
        info = host.load_module("omni-attention-fp8", "omni_attention_fp8.plugin")
        assert info.status == "ok", info.error
        yield host
