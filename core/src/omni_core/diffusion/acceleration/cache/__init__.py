"""Step caches: skip or reuse denoiser work across denoising steps. One module per technique,
each with its option parsing (``*_config``) and its ``apply_*``, as diffusers' hooks are cut:

- :mod:`.first_block` (diffusers' First Block Cache), :mod:`.taylorseer` (diffusers'
  TaylorSeer; :mod:`.taylor_streams`: ours, for declared streams), :mod:`.magcache`
  (diffusers' MagCache), :mod:`.teacache` (ours, on diffusers' hook API), :mod:`.dbcache`
  (cache-dit, optional);
- :mod:`.base`: the per-request :class:`CacheHandle`, the :class:`CacheBackend` base, the
  shared diffusers-hook plumbing and :func:`apply_cache`.

Per request: pipelines run each denoiser call inside ``handle.context(name)`` (a name per request
and CFG branch, e.g. ``f"{request_id}:cond"``) and call ``handle.finish(names)`` when the request
ends; that returns the hit counts and frees the cached tensors of those names. Different names
never share cached residuals, so concurrent requests stay independent.

What a cache must know about a denoiser class (its block lists, TeaCache's indicator and polynomial,
MagCache's ratios) is the :class:`~omni_core.diffusion.denoisers.DenoiserAdapter` its model plugin
registers with ``omni_register_denoisers``; the backends know no model.
"""

from __future__ import annotations

from omni_core.diffusion.acceleration.cache.base import (
    MIN_DIFFUSERS_FOR_CACHES,
    CacheBackend,
    CacheHandle,
    CacheStats,
    apply_cache,
    diffusers_hooks_available,
)
from omni_core.diffusion.acceleration.cache.dbcache import DBCache, dbcache_available
from omni_core.diffusion.acceleration.cache.first_block import FirstBlockCache
from omni_core.diffusion.acceleration.cache.magcache import MagCache
from omni_core.diffusion.acceleration.cache.taylorseer import TaylorSeerCache
from omni_core.diffusion.acceleration.cache.teacache import TeaCache

__all__ = [
    "MIN_DIFFUSERS_FOR_CACHES",
    "CacheBackend",
    "CacheHandle",
    "CacheStats",
    "DBCache",
    "FirstBlockCache",
    "MagCache",
    "TaylorSeerCache",
    "TeaCache",
    "apply_cache",
    "dbcache_available",
    "diffusers_hooks_available",
]
