"""TaylorSeer (diffusers' ``TaylorSeerCacheConfig``): full compute every ``cache_interval``
steps, Taylor-extrapolated block outputs in between.

Blocks whose layout diffusers knows get diffusers' own hooks. Blocks whose adapter declares
``block_streams`` get the same schedule and expansion on omni's hooks, one set of Taylor
factors per stream (:mod:`.taylor_streams`; ``lite`` is refused there).

Options: ``cache_interval`` (5), ``warmup_steps`` (3, full compute first), ``max_order`` (1),
``lite`` (False: cache only proj_out, skip blocks), ``factors_dtype`` (``bfloat16``).
Memory: the full variant keeps ``max_order + 1`` tensors of every block's output per request
branch (tens of GiB for a 14B video model at 480p); ``lite`` keeps one tensor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import ConfigError
from omni_core.diffusion.acceleration.cache.base import (
    CacheBackend,
    CacheHandle,
    check_options,
    diffusers_hooks,
    finish_apply,
    option,
)
from omni_core.diffusion.acceleration.cache.taylor_streams import (
    TaylorSeerOptions,
    apply_stream_taylorseer,
)
from omni_core.diffusion.denoisers import cache_block_list

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.config import CacheConfig
    from omni_core.diffusion.denoisers import DenoiserAdapter

OPTIONS = frozenset({"cache_interval", "warmup_steps", "max_order", "lite", "factors_dtype"})


def _torch_dtype(name: Any) -> Any:
    import torch

    value = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ConfigError(f"cache.options.factors_dtype: unknown dtype {name!r}")
    return value


def taylorseer_options(config: CacheConfig) -> TaylorSeerOptions:
    """``cache.options`` checked and typed (both implementations read these)."""
    check_options(config, OPTIONS, TaylorSeerCache.name)
    opts = TaylorSeerOptions(
        cache_interval=option(config, "cache_interval", 5, int),
        warmup_steps=option(config, "warmup_steps", 3, int),
        max_order=option(config, "max_order", 1, int),
        factors_dtype=_torch_dtype(config.options.get("factors_dtype", "bfloat16")),
        lite=bool(config.options.get("lite", False)),
    )
    opts.check()
    return opts


def taylorseer_config(config: CacheConfig, module: Any, adapter: DenoiserAdapter) -> Any:
    """``cache.options`` checked and turned into diffusers' ``TaylorSeerCacheConfig``, whose
    cache identifiers are the adapter's block lists."""
    from diffusers.hooks import TaylorSeerCacheConfig

    opts = taylorseer_options(config)
    lists = dict.fromkeys(name.split(".")[0] for name, _ in cache_block_list(module, adapter))
    return TaylorSeerCacheConfig(
        cache_interval=opts.cache_interval,
        disable_cache_before_step=opts.warmup_steps,
        max_order=opts.max_order,
        taylor_factors_dtype=opts.factors_dtype,
        cache_identifiers=[rf"^{name}\.\d+$" for name in lists],
        use_lite_mode=opts.lite,
    )


def apply_taylorseer(module: Any, cfg: Any, adapter: DenoiserAdapter) -> CacheHandle:
    """diffusers' ``apply_taylorseer_cache`` plus omni's per-request hit counting."""
    from diffusers.hooks import apply_taylorseer_cache
    from diffusers.hooks.taylorseer_cache import _TAYLORSEER_CACHE_HOOK

    apply_taylorseer_cache(module, cfg)
    hooks = diffusers_hooks()
    first = cache_block_list(module, adapter)[0][1]
    if cfg.use_lite_mode:
        first = getattr(module, "proj_out", first)
    registry = hooks.HookRegistry.check_if_exists_or_initialize(first)

    def probe() -> bool:
        state = registry.get_hook(_TAYLORSEER_CACHE_HOOK).state_manager.get_state()
        return state.last_update_step != state.current_step

    handle = CacheHandle(
        backend=TaylorSeerCache.name,
        module=module,
        adapter=adapter,
        probe=probe,
        options={
            "cache_interval": cfg.cache_interval,
            "warmup_steps": cfg.disable_cache_before_step,
            "max_order": cfg.max_order,
        },
    )
    return finish_apply(handle, (_TAYLORSEER_CACHE_HOOK,))


class TaylorSeerCache(CacheBackend):
    """TaylorSeer: full compute every ``cache_interval`` steps, extrapolated between (options
    in the module docstring); diffusers' hooks, or omni's for declared streams."""

    name = "taylorseer"
    options = OPTIONS

    def apply(self, module: Any, config: CacheConfig, adapter: DenoiserAdapter) -> CacheHandle:
        if adapter.block_streams:
            return apply_stream_taylorseer(module, taylorseer_options(config), adapter)
        return apply_taylorseer(module, taylorseer_config(config, module, adapter), adapter)
