"""Built-in step-cache backends, registered through the same hook as any plugin's.

Model plugins add per-model data (blocks, TeaCache coefficients, MagCache ratios) through a
``cache_adapter`` attribute on their pipeline class; see :mod:`omni_core.acceleration.cache`.
"""

from __future__ import annotations

from collections.abc import Callable

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.registry import CacheBackendSpec

OMNI_PLUGIN_API = PLUGIN_API_VERSION

_IMPL = "omni_core.acceleration.cache"


@hookimpl
def omni_register_cache_backends(register: Callable[[CacheBackendSpec], None]) -> None:
    hooks_ok = f"{_IMPL}:diffusers_hooks_available"
    register(
        CacheBackendSpec(
            name="first-block",
            implementation=f"{_IMPL}:FirstBlockCache",
            availability=hooks_ok,
            description="diffusers First Block Cache: skip blocks 1..N when block 0's residual "
            "barely changes (option threshold).",
        )
    )
    register(
        CacheBackendSpec(
            name="taylorseer",
            implementation=f"{_IMPL}:TaylorSeerCache",
            availability=hooks_ok,
            description="diffusers TaylorSeer: full compute every cache_interval steps, "
            "Taylor-extrapolated block outputs in between.",
        )
    )
    register(
        CacheBackendSpec(
            name="magcache",
            implementation=f"{_IMPL}:MagCache",
            availability=hooks_ok,
            description="diffusers MagCache: skip steps while the residual-magnitude error is "
            "small; needs per-model mag_ratios.",
        )
    )
    register(
        CacheBackendSpec(
            name="teacache",
            implementation=f"{_IMPL}:TeaCache",
            availability=hooks_ok,
            description="TeaCache: timestep-embedding-aware step skipping with per-model "
            "polynomial coefficients from the model plugin's adapter.",
        )
    )
    register(
        CacheBackendSpec(
            name="dbcache",
            implementation=f"{_IMPL}:DBCache",
            availability=f"{_IMPL}:dbcache_available",
            description="cache-dit DBCache (dual block cache); needs the optional cache-dit.",
        )
    )
