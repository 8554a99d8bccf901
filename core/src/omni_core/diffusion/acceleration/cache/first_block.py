"""First Block Cache (diffusers' ``FirstBlockCacheConfig``): skip blocks 1..N while block 0's
residual barely changes between steps. Option: ``threshold`` (relative L1, default 0.05)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import ConfigError
from omni_core.diffusion.acceleration.cache.base import (
    CacheBackend,
    CacheHandle,
    check_options,
    finish_apply,
    head_state,
    option,
)
from omni_core.diffusion.denoisers import block_list

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.config import CacheConfig
    from omni_core.diffusion.denoisers import DenoiserAdapter

OPTIONS = frozenset({"threshold"})


def first_block_config(config: CacheConfig) -> Any:
    """``cache.options`` checked and turned into diffusers' ``FirstBlockCacheConfig``."""
    from diffusers.hooks import FirstBlockCacheConfig

    check_options(config, OPTIONS, FirstBlockCache.name)
    return FirstBlockCacheConfig(threshold=option(config, "threshold", 0.05, float))


def apply_first_block_cache(module: Any, cfg: Any, adapter: DenoiserAdapter) -> CacheHandle:
    """diffusers' First Block Cache wired over the adapter's blocks (any block-list name)."""
    from diffusers.hooks.first_block_cache import (
        _FBC_BLOCK_HOOK,
        _FBC_LEADER_BLOCK_HOOK,
        FBCSharedBlockState,
        _apply_fbc_block_hook,
        _apply_fbc_head_block_hook,
    )
    from diffusers.hooks.hooks import StateManager

    blocks = [b for _, b in block_list(module, adapter)]
    if len(blocks) < 2:
        raise ConfigError("first-block cache needs at least two transformer blocks")
    # Same wiring as diffusers.hooks.apply_first_block_cache, but over the adapter's blocks
    # (so models whose block list has another name work too).
    manager = StateManager(FBCSharedBlockState, (), {})
    _apply_fbc_head_block_hook(blocks[0], manager, cfg.threshold)
    for block in blocks[1:-1]:
        _apply_fbc_block_hook(block, manager)
    _apply_fbc_block_hook(blocks[-1], manager, is_tail=True)
    state = head_state(blocks[0], _FBC_LEADER_BLOCK_HOOK)
    handle = CacheHandle(
        backend=FirstBlockCache.name,
        module=module,
        adapter=adapter,
        probe=lambda: not state().should_compute,
        options={"threshold": cfg.threshold},
    )
    return finish_apply(handle, (_FBC_LEADER_BLOCK_HOOK, _FBC_BLOCK_HOOK))


class FirstBlockCache(CacheBackend):
    """diffusers' First Block Cache: skip the other blocks when block 0's residual barely moves.

    Options: ``threshold`` (relative L1 change of block 0's residual, default 0.05).
    """

    name = "first-block"
    options = OPTIONS

    def apply(self, module: Any, config: CacheConfig, adapter: DenoiserAdapter) -> CacheHandle:
        return apply_first_block_cache(module, first_block_config(config), adapter)
