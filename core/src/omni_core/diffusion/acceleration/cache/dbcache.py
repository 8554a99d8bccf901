"""DBCache (dual block cache) of the optional ``cache-dit`` package: Fn compute blocks, Bn
residual blocks, dynamic skipping.

Options are passed through to ``cache_dit.DBCacheConfig`` (``Fn_compute_blocks``,
``Bn_compute_blocks``, ``residual_diff_threshold``, ...); cache-dit validates them. How a block's
inputs and outputs are laid out is the adapter's ``cache_dit_pattern`` (a ``ForwardPattern``
member name), registered by the denoiser's model plugin.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import ConfigError
from omni_core.contract.registry import Availability
from omni_core.diffusion.acceleration.cache.base import CacheBackend, CacheHandle
from omni_core.diffusion.acceleration.cache.streams import refuse_declared_streams
from omni_core.diffusion.denoisers import cache_block_list

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.config import CacheConfig
    from omni_core.diffusion.denoisers import DenoiserAdapter


def dbcache_available() -> Availability:
    """cache-dit is an optional extra; say so when it is missing."""
    if importlib.util.find_spec("cache_dit") is None:
        return Availability.no("cache-dit not installed (pip install cache-dit)")
    return Availability.yes()


def dbcache_config(config: CacheConfig) -> Any:
    """``cache.options`` as cache-dit's ``DBCacheConfig`` (cache-dit checks the names)."""
    import cache_dit  # type: ignore[import-not-found]

    try:
        return cache_dit.DBCacheConfig(**dict(config.options))
    except Exception as exc:
        raise ConfigError(f"cache 'dbcache': cache-dit refused the options: {exc}") from exc


def apply_dbcache(
    module: Any, cfg: Any, adapter: DenoiserAdapter, options: dict[str, Any] | None = None
) -> CacheHandle:
    """``cache_dit.enable_cache`` over the adapter's first block list."""
    import cache_dit  # type: ignore[import-not-found]

    list_name = cache_block_list(module, adapter)[0][0].split(".")[0]
    try:
        pattern = getattr(cache_dit.ForwardPattern, adapter.cache_dit_pattern)
        cache_dit.enable_cache(
            cache_dit.BlockAdapter(
                transformer=module,
                blocks=getattr(module, list_name),
                forward_pattern=pattern,
            ),
            cache_config=cfg,
        )
    except Exception as exc:
        raise ConfigError(f"cache 'dbcache': cache-dit refused the model: {exc}") from exc

    def probe() -> bool:  # cache-dit keeps its own counters
        return False

    def remove() -> None:
        cache_dit.disable_cache(module)

    handle = CacheHandle(
        backend=DBCache.name, module=module, adapter=adapter, probe=probe, options=options or {}
    )
    handle._remove = remove
    return handle


class DBCache(CacheBackend):
    """cache-dit's DBCache (dual block cache); needs the optional ``cache-dit`` package."""

    name = "dbcache"

    def apply(self, module: Any, config: CacheConfig, adapter: DenoiserAdapter) -> CacheHandle:
        refuse_declared_streams(adapter, self.name)
        availability = dbcache_available()
        if not availability.available:
            raise ConfigError(f"cache 'dbcache' cannot run here: {availability.reason}")
        return apply_dbcache(module, dbcache_config(config), adapter, dict(config.options))
