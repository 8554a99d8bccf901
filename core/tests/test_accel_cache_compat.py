"""Step caches across diffusers releases: a missing ``invalidate_child_registries_cache`` falls
back to clearing the child-registry cache by hand; a diffusers without the cache-context API
(before 0.41, e.g. 0.36) is a ConfigError naming the version needed, raised before any compute."""

from __future__ import annotations

import pytest
import torch
from diffusers.hooks import hooks as diffusers_hooks

from omni_core.contract.config import CacheConfig
from omni_core.contract.errors import ConfigError
from omni_core.diffusion.acceleration.cache import MIN_DIFFUSERS_FOR_CACHES, apply_cache

STEPS = 6


def _tiny_wan() -> torch.nn.Module:
    from diffusers import WanTransformer3DModel

    torch.manual_seed(0)
    return WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=8,
        in_channels=4,
        out_channels=4,
        text_dim=16,
        freq_dim=16,
        ffn_dim=32,
        num_layers=3,
        rope_max_seq_len=32,
    ).eval()


def _loop(model, handle=None, name: str = "rq:cond") -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 4, 2, 8, 8, generator=g)
    text = torch.randn(1, 6, 16, generator=g)
    for t in torch.linspace(999, 50, STEPS):
        with torch.no_grad():
            if handle is None:
                v = model(hidden_states=x, timestep=t.reshape(1), encoder_hidden_states=text)[0]
            else:
                with handle.context(name):
                    v = model(hidden_states=x, timestep=t.reshape(1), encoder_hidden_states=text)[0]
        x = x - v / STEPS
    return x


@pytest.mark.parametrize("backend", ["first-block", "teacache"])
def test_cache_without_invalidate_method(backend, registry, monkeypatch):
    """Without the fallback this raised AttributeError (diffusers lacking the method)."""
    monkeypatch.delattr(diffusers_hooks.HookRegistry, "invalidate_child_registries_cache")
    reference = _loop(_tiny_wan())
    # exact at threshold 0
    model = _tiny_wan()
    handle = apply_cache(
        model, CacheConfig(backend=backend, options={"threshold": 0.0}), registry=registry
    )
    torch.testing.assert_close(_loop(model, handle), reference, rtol=1e-5, atol=1e-5)
    assert handle.finish(["rq:cond"]).calls == STEPS
    # lossy: hits are counted, and removing the hooks restores the plain model
    model = _tiny_wan()
    handle = apply_cache(
        model, CacheConfig(backend=backend, options={"threshold": 10.0}), registry=registry
    )
    _loop(model, handle)
    stats = handle.finish(["rq:cond"])
    assert stats.calls == STEPS and 0 < stats.hits < STEPS
    handle.remove()
    torch.testing.assert_close(_loop(model), reference, rtol=1e-5, atol=1e-5)


def test_fallback_clears_stale_child_registry_cache(registry, monkeypatch):
    """The fallback must really invalidate: block hooks added later are found."""
    monkeypatch.delattr(diffusers_hooks.HookRegistry, "invalidate_child_registries_cache")
    model = _tiny_wan()
    root = diffusers_hooks.HookRegistry.check_if_exists_or_initialize(model)
    assert root._get_child_registries() == []  # caches an empty list
    handle = apply_cache(
        model, CacheConfig(backend="first-block", options={"threshold": 0.0}), registry=registry
    )
    assert len(root._get_child_registries()) >= 1
    handle.remove()


def test_old_diffusers_is_a_config_error(registry, monkeypatch):
    """diffusers 0.36 has neither CacheContext nor _set_cache_context."""
    monkeypatch.delattr(diffusers_hooks, "_set_cache_context")
    monkeypatch.delattr(diffusers_hooks, "CacheContext")
    monkeypatch.delattr(diffusers_hooks.HookRegistry, "invalidate_child_registries_cache")
    model = _tiny_wan()
    with pytest.raises(ConfigError) as err:
        apply_cache(model, CacheConfig(backend="teacache"), registry=registry)
    message = str(err.value)
    assert f"diffusers>={MIN_DIFFUSERS_FOR_CACHES}" in message
    assert "_set_cache_context" in message and "installed:" in message
    assert not hasattr(model, "_diffusers_hook")  # raised before touching the model
