"""Built-in step-cache backends, registered through the same hook as any plugin's.

One implementation module per technique (:mod:`omni_core.diffusion.acceleration.cache`). Per-model
data (block lists, TeaCache coefficients, MagCache ratios) is not here: the denoiser's model plugin
registers it as a ``DenoiserSpec`` (``omni_register_denoisers``).
"""

from __future__ import annotations

from collections.abc import Callable

from omni_core import PLUGIN_API_VERSION, CacheBackendSpec, hookimpl

OMNI_PLUGIN_API = PLUGIN_API_VERSION

_IMPL = "omni_core.diffusion.acceleration.cache"
_HOOKS_OK = f"{_IMPL}.base:diffusers_hooks_available"


@hookimpl
def omni_register_cache_backends(register: Callable[[CacheBackendSpec], None]) -> None:
    register(
        CacheBackendSpec(
            name="first-block",
            implementation=f"{_IMPL}.first_block:FirstBlockCache",
            availability=_HOOKS_OK,
            description="diffusers First Block Cache: skip blocks 1..N when block 0's residual "
            "barely changes (option threshold).",
        )
    )
    register(
        CacheBackendSpec(
            name="taylorseer",
            implementation=f"{_IMPL}.taylorseer:TaylorSeerCache",
            availability=_HOOKS_OK,
            description="diffusers TaylorSeer: full compute every cache_interval steps, "
            "Taylor-extrapolated block outputs in between.",
        )
    )
    register(
        CacheBackendSpec(
            name="magcache",
            implementation=f"{_IMPL}.magcache:MagCache",
            availability=_HOOKS_OK,
            description="diffusers MagCache: skip steps while the residual-magnitude error is "
            "small; needs per-model mag_ratios.",
        )
    )
    register(
        CacheBackendSpec(
            name="teacache",
            implementation=f"{_IMPL}.teacache:TeaCache",
            availability=_HOOKS_OK,
            description="TeaCache: timestep-embedding-aware step skipping with per-model "
            "polynomial coefficients from the model plugin's DenoiserSpec.",
        )
    )
    register(
        CacheBackendSpec(
            name="dbcache",
            implementation=f"{_IMPL}.dbcache:DBCache",
            availability=f"{_IMPL}.dbcache:dbcache_available",
            description="cache-dit DBCache (dual block cache); needs the optional cache-dit.",
        )
    )
