"""MagCache (diffusers' ``MagCacheConfig``): skip steps while the accumulated residual-magnitude
error stays small.

It needs per-model magnitude ratios: the adapter's ``mag_ratios`` (registered by the model
plugin) or the option ``mag_ratios`` (comma-separated), and the step count they are interpolated
to (``num_inference_steps``). Options: ``threshold`` (0.06), ``max_skip_steps`` (3),
``retention_ratio`` (0.2), ``num_inference_steps`` (50), ``mag_ratios``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import ConfigError
from omni_core.diffusion.acceleration.cache.base import (
    CacheBackend,
    CacheHandle,
    check_options,
    finish_apply,
    floats,
    head_state,
    option,
)
from omni_core.diffusion.acceleration.cache.streams import refuse_declared_streams
from omni_core.diffusion.denoisers import cache_block_list

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.config import CacheConfig
    from omni_core.diffusion.denoisers import DenoiserAdapter

OPTIONS = frozenset(
    {"threshold", "max_skip_steps", "retention_ratio", "num_inference_steps", "mag_ratios"}
)


def magcache_config(config: CacheConfig, adapter: DenoiserAdapter) -> Any:
    """``cache.options`` checked and turned into diffusers' ``MagCacheConfig``."""
    from diffusers.hooks import MagCacheConfig

    check_options(config, OPTIONS, MagCache.name)
    ratios = floats(config.options.get("mag_ratios"), "mag_ratios") or adapter.mag_ratios
    if not ratios:
        raise ConfigError(
            f"cache 'magcache' needs magnitude ratios for {adapter.architecture}; its adapter "
            "has none: pass cache.options.mag_ratios (calibrate them with diffusers' "
            "MagCacheConfig(calibrate=True)) or use 'first-block' / 'teacache'"
        )
    return MagCacheConfig(
        threshold=option(config, "threshold", 0.06, float),
        max_skip_steps=option(config, "max_skip_steps", 3, int),
        retention_ratio=option(config, "retention_ratio", 0.2, float),
        num_inference_steps=option(config, "num_inference_steps", 50, int),
        mag_ratios=list(ratios),
    )


def apply_magcache(module: Any, cfg: Any, adapter: DenoiserAdapter) -> CacheHandle:
    """diffusers' MagCache wired over the adapter's blocks."""
    from diffusers.hooks.hooks import StateManager
    from diffusers.hooks.mag_cache import (
        _MAG_CACHE_BLOCK_HOOK,
        _MAG_CACHE_LEADER_BLOCK_HOOK,
        MagCacheState,
        _apply_mag_cache_block_hook,
        _apply_mag_cache_head_hook,
    )

    blocks = [b for _, b in cache_block_list(module, adapter)]
    manager = StateManager(MagCacheState, (), {})
    _apply_mag_cache_head_hook(blocks[0], manager, cfg)
    for block in blocks[1:-1]:
        _apply_mag_cache_block_hook(block, manager, cfg)
    _apply_mag_cache_block_hook(blocks[-1], manager, cfg, is_tail=True)
    state = head_state(blocks[0], _MAG_CACHE_LEADER_BLOCK_HOOK)
    handle = CacheHandle(
        backend=MagCache.name,
        module=module,
        adapter=adapter,
        probe=lambda: not state().should_compute,
        options={"threshold": cfg.threshold, "num_inference_steps": cfg.num_inference_steps},
    )
    return finish_apply(handle, (_MAG_CACHE_LEADER_BLOCK_HOOK, _MAG_CACHE_BLOCK_HOOK))


class MagCache(CacheBackend):
    """diffusers' MagCache over the adapter's blocks (options in the module docstring)."""

    name = "magcache"
    options = OPTIONS

    def apply(self, module: Any, config: CacheConfig, adapter: DenoiserAdapter) -> CacheHandle:
        refuse_declared_streams(adapter, self.name)
        return apply_magcache(module, magcache_config(config, adapter), adapter)
