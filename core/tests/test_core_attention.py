"""Attention resolution per role and validation against the platform (CPU only)."""

from __future__ import annotations

import pytest

from omni_core.contract.attention import (
    AttentionRouter,
    dispatch_attention,
    resolve_backend,
    use_router,
)
from omni_core.contract.config import AttentionConfig
from omni_core.contract.errors import ConfigError
from omni_core.contract.host import PluginHost
from omni_core.contract.platforms import CpuPlatform
from omni_core.contract.registry import Registry


@pytest.fixture
def registry(omni_host: PluginHost) -> Registry:
    return omni_host.registry


def test_auto_resolves_to_the_platforms_preferred_backend(registry: Registry) -> None:
    assert resolve_backend("auto", registry, CpuPlatform()).name == "sdpa"


def test_unknown_backend_is_a_config_error_naming_the_field_and_choices(
    registry: Registry,
) -> None:
    with pytest.raises(ConfigError) as excinfo:
        resolve_backend("flashy", registry, CpuPlatform())
    message = str(excinfo.value)
    assert message.startswith("attention.backend: unknown attention backend 'flashy'")
    assert "sdpa-math" in message


def test_cuda_only_backend_is_refused_on_cpu(registry: Registry) -> None:
    with pytest.raises(ConfigError, match="'sdpa-cudnn' cannot run on platform 'cpu'"):
        resolve_backend("sdpa-cudnn", registry, CpuPlatform())


def test_router_resolves_each_role_and_matches_torch_sdpa(registry: Registry) -> None:
    import torch
    import torch.nn.functional as F

    config = AttentionConfig(backend="sdpa", cross="sdpa-math")
    router = AttentionRouter.build(config, registry, CpuPlatform())
    assert router.names == {"self": "sdpa", "cross": "sdpa-math", "joint": "sdpa"}
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 7, 3, 8, generator=generator) for _ in range(3))
    reference = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    ).transpose(1, 2)
    with use_router(router):
        for role in ("self", "cross", "joint"):
            out = dispatch_attention(q, k, v, role=role)
            assert out.shape == (2, 7, 3, 8)
            torch.testing.assert_close(out, reference)


def test_router_refuses_a_role_that_cannot_run_here(registry: Registry) -> None:
    with pytest.raises(ConfigError, match="'sdpa-flash' cannot run on platform 'cpu'"):
        AttentionRouter.build(AttentionConfig(joint="sdpa-flash"), registry, CpuPlatform())
