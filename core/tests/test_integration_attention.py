"""Attention errors name the setting at fault: a per-role override, not attention.backend."""

from __future__ import annotations

import pytest

from omni_core.contract.attention import AttentionRouter
from omni_core.contract.config import AttentionConfig
from omni_core.contract.errors import ConfigError
from omni_core.contract.host import PluginHost
from omni_core.contract.platforms import CpuPlatform


@pytest.mark.parametrize("role", ["self", "cross", "joint"])
def test_integration_role_override_errors_name_the_role(omni_host: PluginHost, role: str) -> None:
    registry = omni_host.registry
    with pytest.raises(ConfigError) as unknown:
        AttentionRouter.build(AttentionConfig(**{role: "flashy"}), registry, CpuPlatform())
    assert str(unknown.value).startswith(f"attention.{role}: unknown attention backend 'flashy'")
    with pytest.raises(ConfigError) as unusable:
        AttentionRouter.build(AttentionConfig(**{role: "sdpa-cudnn"}), registry, CpuPlatform())
    assert str(unusable.value).startswith(f"attention.{role}: 'sdpa-cudnn' cannot run")


def test_integration_global_backend_errors_still_name_attention_backend(
    omni_host: PluginHost,
) -> None:
    config = AttentionConfig(backend="flashy", cross="sdpa")
    with pytest.raises(ConfigError, match=r"^attention\.backend: unknown attention backend"):
        AttentionRouter.build(config, omni_host.registry, CpuPlatform())
