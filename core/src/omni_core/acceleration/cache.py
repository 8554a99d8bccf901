"""Step caches: skip or reuse denoiser work across denoising steps, with per-model adapters.

A cache backend (registered as a :class:`~omni_core.registry.CacheBackendSpec`) is a class with
``apply(module, config, adapter) -> CacheHandle``. The *adapter* is the model-specific part a model
plugin supplies (which ModuleList holds the repeated blocks, TeaCache's polynomial, MagCache's
magnitude ratios); the backend is model-agnostic. Backends build on diffusers' hook machinery
(``diffusers.hooks``): FirstBlockCache, TaylorSeer and MagCache are diffusers' own hooks,
TeaCache is ours, written on the same :class:`~diffusers.hooks.ModelHook` API. DBCache wraps
cache-dit when it is installed.

Per request: pipelines run each denoiser call inside ``handle.context(name)`` (a name per request
and CFG branch, e.g. ``f"{request_id}:cond"``) and call ``handle.finish(names)`` when the request
ends; that returns the hit counts and frees the cached tensors of those names. Different names
never share cached residuals, so concurrent requests stay independent.

Adapters are found, in order: the pipeline class attribute ``cache_adapter`` (a CacheAdapter, a
``"module:attr"`` string pointing at one, a dict keyed by the denoiser's class name, or a callable
``(module) -> CacheAdapter``), adapters registered with :func:`register_cache_adapter`, the built-in
ones below (Wan, Qwen-Image), and finally a generic adapter derived from the module's block list.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omni_core.errors import ConfigError
from omni_core.registry import Availability, load_object

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.config import CacheConfig

#: Names of ModuleLists that hold repeated transformer blocks (diffusers' conventions).
BLOCK_LIST_NAMES: tuple[str, ...] = (
    "blocks",
    "transformer_blocks",
    "single_transformer_blocks",
    "layers",
)

Indicator = Callable[["torch.nn.Module", tuple, dict], "torch.Tensor"]


@dataclass(frozen=True)
class CacheAdapter:
    """What a step cache needs to know about one denoiser architecture.

    ``teacache_indicator`` is either the name of a block-0 forward argument whose relative change
    across steps drives TeaCache (``"temb"``: the timestep modulation), or a callable
    ``(block0, args, kwargs) -> Tensor`` computing the modulated input. ``teacache_coefficients``
    are the numpy-``polyval`` coefficients (highest power first) that map that raw relative L1
    change to the expected change of the model output; ``(1.0, 0.0)`` is the identity.
    """

    architecture: str
    blocks: tuple[str, ...] = ("blocks",)
    teacache_indicator: str | Indicator = "temb"
    teacache_coefficients: tuple[float, ...] = (1.0, 0.0)
    teacache_source: str = "uncalibrated identity polynomial"
    mag_ratios: tuple[float, ...] | None = None
    mag_source: str = ""
    #: Attention modules whose processors use ``fuse_projections`` (diffusers Wan: yes).
    fuse_qkv: bool = False
    notes: str = ""


_REGISTERED: dict[str, CacheAdapter | Callable[[Any], CacheAdapter]] = {}


def register_cache_adapter(
    architecture: str, adapter: CacheAdapter | Callable[[Any], CacheAdapter]
) -> None:
    """Register an adapter (or a ``module -> adapter`` chooser) for a denoiser class name."""
    _REGISTERED[architecture] = adapter


# -- built-in adapters: data, with where the numbers come from -------------------------------------
# TeaCache coefficients for Wan 2.1 are the published "ret_steps" polynomials of TeaCache4Wan2.1
# (ali-vilab/TeaCache, Liu et al. 2024, "Timestep Embedding Tells: It's Time to Cache for Video
# Diffusion Model"), fitted on the timestep modulation ``e0`` -- what diffusers' Wan blocks receive
# as ``temb``. Wan2.2-TI2V-5B: a community fit circulated with Wan 2.2 ports (6 terms); unverified
# by us. Qwen-Image: community values labelled "to be tuned" by their authors, fitted on the
# first block's modulated image input; unverified. Re-fit them with the calibration helper in
# sdk-docs/docs/acceleration.md before trusting quality numbers.
WAN21_T2V_1_3B = (-5.21862437e04, 9.23041404e03, -5.28275948e02, 1.36987616e01, -4.99875664e-02)
WAN21_T2V_14B = (-3.03318725e05, 4.90537029e04, -2.65530556e03, 5.87365115e01, -3.15583525e-01)
WAN21_I2V_14B_480P = (2.57151496e05, -3.54229917e04, 1.40286849e03, -1.35890334e01, 1.32517977e-01)
WAN21_I2V_14B_720P = (8.10705460e03, 2.13393892e03, -3.72934672e02, 1.66203073e01, -4.17769401e-02)
WAN22_TI2V_5B = (
    1.57472669e05,
    -1.15702395e05,
    3.10761669e04,
    -3.83116651e03,
    2.21608777e02,
    -4.81179567e00,
)
QWEN_IMAGE = (4.98651651e02, -2.83781631e02, 5.58554382e01, -3.82021401e00, 2.64230861e-01)


def wan_indicator(block: Any, args: tuple, kwargs: dict) -> torch.Tensor:
    """Wan block 0's ``temb`` (the timestep modulation ``e0``); Wan2.2 TI2V passes one per
    token ([B, tokens, 6, dim]): its last token stands for the video (the first frame may be a
    clean conditioning frame), which keeps the stored indicator small."""
    temb = kwargs["temb"] if "temb" in kwargs else args[2]
    return temb[:, -1] if temb.ndim == 4 else temb


def wan_adapter(module: Any) -> CacheAdapter:
    """Wan 2.1/2.2: pick the TeaCache polynomial from the transformer's size and conditioning."""
    config = getattr(module, "config", None)
    dim = int(getattr(config, "num_attention_heads", 0) or 0) * int(
        getattr(config, "attention_head_dim", 0) or 0
    )
    image = getattr(config, "image_dim", None) is not None
    coefficients, source = (1.0, 0.0), "uncalibrated identity polynomial (unknown Wan size)"
    if dim == 1536:
        coefficients, source = WAN21_T2V_1_3B, "TeaCache4Wan2.1 T2V-1.3B (ret_steps)"
    elif dim == 3072:
        coefficients, source = WAN22_TI2V_5B, "community fit for Wan2.2-TI2V-5B (unverified)"
    elif dim == 5120 and image:
        coefficients, source = WAN21_I2V_14B_480P, "TeaCache4Wan2.1 I2V-14B-480P (ret_steps)"
    elif dim == 5120:
        coefficients, source = WAN21_T2V_14B, "TeaCache4Wan2.1 T2V-14B (ret_steps)"
    return CacheAdapter(
        architecture="WanTransformer3DModel",
        blocks=("blocks",),
        teacache_indicator=wan_indicator,
        teacache_coefficients=coefficients,
        teacache_source=source,
        fuse_qkv=True,
    )


def qwen_image_indicator(block: Any, args: tuple, kwargs: dict) -> torch.Tensor:
    """Qwen-Image block 0's modulated image input (what its TeaCache polynomial was fitted on)."""
    hidden_states = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
    temb = kwargs["temb"] if "temb" in kwargs else args[3]
    mod1 = block.img_mod(temb).chunk(2, dim=-1)[0]
    shift, scale, _ = mod1.chunk(3, dim=-1)
    return block.img_norm1(hidden_states) * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


def qwen_image_adapter(module: Any) -> CacheAdapter:
    return CacheAdapter(
        architecture="QwenImageTransformer2DModel",
        blocks=("transformer_blocks",),
        teacache_indicator=qwen_image_indicator,
        teacache_coefficients=QWEN_IMAGE,
        teacache_source="community fit for Qwen-Image (unverified)",
        fuse_qkv=False,  # diffusers' Qwen processor ignores fused projections
    )


BUILTIN_ADAPTERS: dict[str, Callable[[Any], CacheAdapter]] = {
    "WanTransformer3DModel": wan_adapter,
    "QwenImageTransformer2DModel": qwen_image_adapter,
}


def generic_adapter(module: Any) -> CacheAdapter:
    """An adapter from the module's structure alone: its block lists, no calibration data."""
    import torch

    names = tuple(
        name
        for name, child in module.named_children()
        if name in BLOCK_LIST_NAMES and isinstance(child, torch.nn.ModuleList) and len(child)
    )
    return CacheAdapter(architecture=type(module).__name__, blocks=names or ("blocks",))


def _from_declared(declared: Any, module: Any) -> CacheAdapter | None:
    if declared is None:
        return None
    if isinstance(declared, str):
        declared = load_object(declared)
    if isinstance(declared, CacheAdapter):
        return declared
    if isinstance(declared, dict):
        return _from_declared(declared.get(type(module).__name__), module)
    if callable(declared):
        return declared(module)
    raise ConfigError(f"cache_adapter {declared!r} is not a CacheAdapter, dict or callable")


def resolve_adapter(module: Any, pipeline_cls: Any = None) -> CacheAdapter:
    """The cache adapter for ``module`` (see the module docstring for the lookup order)."""
    adapter = _from_declared(getattr(pipeline_cls, "cache_adapter", None), module)
    if adapter is not None:
        return adapter
    name = type(module).__name__
    for table in (_REGISTERED, BUILTIN_ADAPTERS):
        if name in table:
            found = _from_declared(table[name], module)
            if found is not None:
                return found
    return generic_adapter(module)


def block_list(module: Any, adapter: CacheAdapter) -> list[tuple[str, Any]]:
    """``(qualified name, block)`` for every repeated block the adapter names, in call order."""
    import torch

    out: list[tuple[str, Any]] = []
    for list_name in adapter.blocks:
        blocks = getattr(module, list_name, None)
        if isinstance(blocks, torch.nn.ModuleList):
            out.extend((f"{list_name}.{i}", b) for i, b in enumerate(blocks))
    if not out:
        raise ConfigError(
            f"no repeated blocks found in {type(module).__name__} (looked for {adapter.blocks}); "
            "its model plugin should supply a cache adapter"
        )
    return out


# -- per-request bookkeeping -----------------------------------------------------------------------
@dataclass
class CacheStats:
    """Denoiser calls and how many of them the cache served (skipped the full compute)."""

    calls: int = 0
    hits: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.calls if self.calls else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {"calls": self.calls, "hits": self.hits, "hit_rate": round(self.hit_rate, 4)}


#: First diffusers release with the per-call cache-context API (``CacheContext``,
#: ``_set_cache_context``) that the step caches drive; 0.35-0.40 set contexts by name instead.
MIN_DIFFUSERS_FOR_CACHES = "0.41"
_REQUIRED_HOOKS_API = ("HookRegistry", "ModelHook", "StateManager", "CacheContext")


def _hooks_api_gap(diffusers_hooks: Any) -> list[str]:
    """Names the step caches need that this diffusers' ``hooks`` module lacks."""
    missing = [name for name in _REQUIRED_HOOKS_API if not hasattr(diffusers_hooks, name)]
    if not callable(getattr(diffusers_hooks, "_set_cache_context", None)):
        missing.append("_set_cache_context")
    return missing


def _old_diffusers_message(missing: list[str]) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("diffusers")
    except PackageNotFoundError:  # pragma: no cover - a source checkout without metadata
        installed = "unknown"
    return (
        f"step caches need diffusers>={MIN_DIFFUSERS_FOR_CACHES} (installed: {installed}; "
        f"diffusers.hooks lacks {', '.join(missing)}): "
        f"pip install 'diffusers>={MIN_DIFFUSERS_FOR_CACHES}'"
    )


def _diffusers_hooks() -> Any:
    try:
        from diffusers.hooks import hooks as diffusers_hooks
    except ImportError as exc:  # pragma: no cover - diffusers is a runtime dependency
        raise ConfigError("step caches need diffusers (pip install 'omni-core[runtime]')") from exc
    missing = _hooks_api_gap(diffusers_hooks)
    if missing:
        raise ConfigError(_old_diffusers_message(missing))
    return diffusers_hooks


def _invalidate_child_registries(registry: Any) -> None:
    """Drop the cached child-registry lists after hooks were added or removed.

    diffusers 0.41+ caches each registry's children and offers
    ``invalidate_child_registries_cache``; where that method is missing we clear the same
    per-registry attribute ourselves (a no-op on releases that cache nothing).
    """
    invalidate = getattr(registry, "invalidate_child_registries_cache", None)
    if callable(invalidate):
        invalidate()
        return
    root = getattr(registry, "_module_ref", None)
    if root is None:
        return
    root = getattr(root, "_orig_mod", root)
    for _, mod in root.named_modules():
        child = getattr(getattr(mod, "_orig_mod", mod), "_diffusers_hook", None)
        if child is not None and hasattr(child, "_child_registries_cache"):
            child._child_registries_cache = None


def _child_registries(registry: Any) -> list[Any]:
    """The registries under ``registry`` (diffusers' cached list where it has one)."""
    get = getattr(registry, "_get_child_registries", None)
    if callable(get):
        return list(get())
    root = registry._module_ref
    root = getattr(root, "_orig_mod", root)
    found = []
    for name, mod in root.named_modules():
        child = getattr(getattr(mod, "_orig_mod", mod), "_diffusers_hook", None)
        if name and child is not None:
            found.append(child)
    return found


def _registries(module: Any) -> list[Any]:
    hooks = _diffusers_hooks()
    root = hooks.HookRegistry.check_if_exists_or_initialize(module)
    _invalidate_child_registries(root)
    return [root, *_child_registries(root)]


def _state_managers(module: Any) -> Iterator[Any]:
    hooks = _diffusers_hooks()
    for registry in _registries(module):
        for hook in registry.hooks.values():
            for attr in vars(hook).values():
                if isinstance(attr, hooks.StateManager):
                    yield attr


@dataclass
class CacheHandle:
    """A cache applied to one denoiser: per-context entry, hit counts and cleanup."""

    backend: str
    module: Any
    adapter: CacheAdapter
    #: Returns True when the call that just ran in the current context was served from cache.
    probe: Callable[[], bool]
    lossy: bool = True
    options: dict[str, Any] = field(default_factory=dict)
    _stats: dict[str, CacheStats] = field(default_factory=dict)
    _active: list[str] = field(default_factory=list)
    _remove: Callable[[], None] | None = None

    @contextlib.contextmanager
    def context(self, name: str) -> Iterator[None]:
        """Run one denoiser call of the request-branch ``name`` (e.g. ``"<request_id>:cond"``)."""
        hooks = _diffusers_hooks()
        hooks._set_cache_context(self.module, hooks.CacheContext(name))
        self._active.append(name)
        try:
            yield
        finally:
            self._active.pop()
            hooks._set_cache_context(self.module, None)

    def record(self) -> None:
        """Called by the counting hook after each denoiser forward (host-side bookkeeping)."""
        if not self._active:
            return
        stats = self._stats.setdefault(self._active[-1], CacheStats())
        stats.calls += 1
        stats.hits += int(bool(self.probe()))

    def contexts(self) -> list[str]:
        """Context names that ran at least one denoiser call and were not finished yet."""
        return list(self._stats)

    def stats(self, names: Iterable[str] | None = None) -> CacheStats:
        """Summed stats of ``names`` (all contexts when None)."""
        keys = list(self._stats) if names is None else list(names)
        total = CacheStats()
        for key in keys:
            s = self._stats.get(key)
            if s is not None:
                total.calls += s.calls
                total.hits += s.hits
        return total

    def finish(self, names: Iterable[str]) -> CacheStats:
        """End of a request: return its stats and drop its cached tensors and counters."""
        names = list(names)
        total = self.stats(names)
        for key in names:
            self._stats.pop(key, None)
        for manager in _state_managers(self.module):
            cache = getattr(manager, "_state_cache", None)
            if not isinstance(cache, dict):
                continue
            for key in names:
                state = cache.pop(key, None)
                if state is not None and hasattr(state, "reset"):
                    state.reset()
        return total

    def remove(self) -> None:
        """Take the cache hooks off the module."""
        if self._remove is not None:
            self._remove()
            self._remove = None


def _install_counter(module: Any, handle: CacheHandle) -> None:
    hooks = _diffusers_hooks()

    class _CountCalls(hooks.ModelHook):
        """Root hook: after each denoiser forward, ask the backend whether it was a cache hit."""

        def new_forward(self, mod: Any, *args: Any, **kwargs: Any) -> Any:
            output = self.fn_ref.original_forward(*args, **kwargs)
            handle.record()
            return output

    registry = hooks.HookRegistry.check_if_exists_or_initialize(module)
    registry.register_hook(_CountCalls(), "omni_cache_counter")


def _finish_apply(handle: CacheHandle, hook_names: tuple[str, ...]) -> CacheHandle:
    hooks = _diffusers_hooks()
    _install_counter(handle.module, handle)
    names = (*hook_names, "omni_cache_counter")

    def remove() -> None:
        registry = hooks.HookRegistry.check_if_exists_or_initialize(handle.module)
        for name in names:
            registry.remove_hook(name, recurse=True)
        _invalidate_child_registries(registry)

    handle._remove = remove
    _invalidate_child_registries(hooks.HookRegistry.check_if_exists_or_initialize(handle.module))
    return handle


def _option(config: CacheConfig, key: str, default: Any, kind: type) -> Any:
    value = config.options.get(key, default)
    try:
        return kind(value) if value is not None else None
    except (TypeError, ValueError):
        raise ConfigError(f"cache.options.{key}: expected {kind.__name__}, got {value!r}") from None


def _floats(text: str | None, key: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(x) for x in str(text).replace(" ", "").split(",") if x)
    except ValueError:
        raise ConfigError(f"cache.options.{key}: expected comma-separated numbers") from None


def _torch_dtype(name: Any) -> Any:
    import torch

    value = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ConfigError(f"cache.options.factors_dtype: unknown dtype {name!r}")
    return value


def _check_options(config: CacheConfig, allowed: set[str], backend: str) -> None:
    unknown = sorted(set(config.options) - allowed)
    if unknown:
        raise ConfigError(
            f"cache.options: unknown option(s) {', '.join(unknown)} for {backend!r}; "
            f"known: {', '.join(sorted(allowed))}"
        )


def _head_state(block: Any, hook_name: str) -> Callable[[], Any]:
    hooks = _diffusers_hooks()
    registry = hooks.HookRegistry.check_if_exists_or_initialize(block)

    def get() -> Any:
        return registry.get_hook(hook_name).state_manager.get_state()

    return get


# -- backends --------------------------------------------------------------------------------------
class CacheBackend:
    """Base of every cache backend class (the ``implementation`` of a CacheBackendSpec)."""

    name: str = ""
    lossy: bool = True
    options: frozenset[str] = frozenset()

    def apply(self, module: Any, config: CacheConfig, adapter: CacheAdapter) -> CacheHandle:
        raise NotImplementedError


class FirstBlockCache(CacheBackend):
    """diffusers' First Block Cache: skip the other blocks when block 0's residual barely moves.

    Options: ``threshold`` (relative L1 change of block 0's residual, default 0.05).
    """

    name = "first-block"
    options = frozenset({"threshold"})

    def apply(self, module: Any, config: CacheConfig, adapter: CacheAdapter) -> CacheHandle:
        from diffusers.hooks import FirstBlockCacheConfig
        from diffusers.hooks.first_block_cache import (
            _FBC_BLOCK_HOOK,
            _FBC_LEADER_BLOCK_HOOK,
            FBCSharedBlockState,
            _apply_fbc_block_hook,
            _apply_fbc_head_block_hook,
        )
        from diffusers.hooks.hooks import StateManager

        _check_options(config, set(self.options), self.name)
        cfg = FirstBlockCacheConfig(threshold=_option(config, "threshold", 0.05, float))
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
        state = _head_state(blocks[0], _FBC_LEADER_BLOCK_HOOK)
        handle = CacheHandle(
            backend=self.name,
            module=module,
            adapter=adapter,
            probe=lambda: not state().should_compute,
            options={"threshold": cfg.threshold},
        )
        return _finish_apply(handle, (_FBC_LEADER_BLOCK_HOOK, _FBC_BLOCK_HOOK))


class TaylorSeerCache(CacheBackend):
    """diffusers' TaylorSeer: full compute every ``cache_interval`` steps, extrapolated between.

    Options: ``cache_interval`` (5), ``warmup_steps`` (3, full compute first), ``max_order`` (1),
    ``lite`` (False: cache only proj_out, skip blocks), ``factors_dtype`` (``bfloat16``).
    Memory: the full variant keeps ``max_order + 1`` tensors of every block's output per request
    branch (tens of GiB at Wan 14B 480p); ``lite`` keeps one tensor.
    """

    name = "taylorseer"
    options = frozenset({"cache_interval", "warmup_steps", "max_order", "lite", "factors_dtype"})

    def apply(self, module: Any, config: CacheConfig, adapter: CacheAdapter) -> CacheHandle:
        from diffusers.hooks import TaylorSeerCacheConfig, apply_taylorseer_cache
        from diffusers.hooks.taylorseer_cache import _TAYLORSEER_CACHE_HOOK

        _check_options(config, set(self.options), self.name)
        blocks = block_list(module, adapter)
        patterns = [
            rf"^{name.split('.')[0]}\.\d+$"
            for name in dict.fromkeys(n.split(".")[0] + ".0" for n, _ in blocks)
        ]
        cfg = TaylorSeerCacheConfig(
            cache_interval=_option(config, "cache_interval", 5, int),
            disable_cache_before_step=_option(config, "warmup_steps", 3, int),
            max_order=_option(config, "max_order", 1, int),
            taylor_factors_dtype=_torch_dtype(config.options.get("factors_dtype", "bfloat16")),
            cache_identifiers=patterns,
            use_lite_mode=bool(config.options.get("lite", False)),
        )
        apply_taylorseer_cache(module, cfg)
        hooks = _diffusers_hooks()
        first = blocks[0][1]
        if cfg.use_lite_mode:
            first = getattr(module, "proj_out", first)
        registry = hooks.HookRegistry.check_if_exists_or_initialize(first)

        def probe() -> bool:
            state = registry.get_hook(_TAYLORSEER_CACHE_HOOK).state_manager.get_state()
            return state.last_update_step != state.current_step

        handle = CacheHandle(
            backend=self.name,
            module=module,
            adapter=adapter,
            probe=probe,
            options={
                "cache_interval": cfg.cache_interval,
                "warmup_steps": cfg.disable_cache_before_step,
                "max_order": cfg.max_order,
            },
        )
        return _finish_apply(handle, (_TAYLORSEER_CACHE_HOOK,))


class MagCache(CacheBackend):
    """diffusers' MagCache: skip steps while the accumulated residual-magnitude error is small.

    Needs per-model magnitude ratios (adapter ``mag_ratios`` or option ``mag_ratios`` as
    comma-separated numbers) and the step count they are interpolated to (``num_inference_steps``).
    Options: ``threshold`` (0.06), ``max_skip_steps`` (3), ``retention_ratio`` (0.2),
    ``num_inference_steps`` (50), ``mag_ratios``.
    """

    name = "magcache"
    options = frozenset(
        {"threshold", "max_skip_steps", "retention_ratio", "num_inference_steps", "mag_ratios"}
    )

    def apply(self, module: Any, config: CacheConfig, adapter: CacheAdapter) -> CacheHandle:
        from diffusers.hooks import MagCacheConfig
        from diffusers.hooks.hooks import StateManager
        from diffusers.hooks.mag_cache import (
            _MAG_CACHE_BLOCK_HOOK,
            _MAG_CACHE_LEADER_BLOCK_HOOK,
            MagCacheState,
            _apply_mag_cache_block_hook,
            _apply_mag_cache_head_hook,
        )

        _check_options(config, set(self.options), self.name)
        ratios = _floats(config.options.get("mag_ratios"), "mag_ratios") or adapter.mag_ratios
        if not ratios:
            raise ConfigError(
                f"cache 'magcache' needs magnitude ratios for {adapter.architecture}; its adapter "
                "has none: pass cache.options.mag_ratios (calibrate them with diffusers' "
                "MagCacheConfig(calibrate=True)) or use 'first-block' / 'teacache'"
            )
        cfg = MagCacheConfig(
            threshold=_option(config, "threshold", 0.06, float),
            max_skip_steps=_option(config, "max_skip_steps", 3, int),
            retention_ratio=_option(config, "retention_ratio", 0.2, float),
            num_inference_steps=_option(config, "num_inference_steps", 50, int),
            mag_ratios=list(ratios),
        )
        blocks = [b for _, b in block_list(module, adapter)]
        manager = StateManager(MagCacheState, (), {})
        _apply_mag_cache_head_hook(blocks[0], manager, cfg)
        for block in blocks[1:-1]:
            _apply_mag_cache_block_hook(block, manager, cfg)
        _apply_mag_cache_block_hook(blocks[-1], manager, cfg, is_tail=True)
        state = _head_state(blocks[0], _MAG_CACHE_LEADER_BLOCK_HOOK)
        handle = CacheHandle(
            backend=self.name,
            module=module,
            adapter=adapter,
            probe=lambda: not state().should_compute,
            options={"threshold": cfg.threshold, "num_inference_steps": cfg.num_inference_steps},
        )
        return _finish_apply(handle, (_MAG_CACHE_LEADER_BLOCK_HOOK, _MAG_CACHE_BLOCK_HOOK))


class TeaCache(CacheBackend):
    """TeaCache (timestep-embedding-aware cache), our implementation on diffusers' hook API.

    Before block 0 runs, the relative L1 change of the adapter's indicator (the timestep
    modulation) since the last computed step is mapped through the adapter's polynomial and
    accumulated; while the sum stays below ``threshold`` every block is skipped and the whole
    stack's last residual is reused. Options: ``threshold`` (0.2), ``warmup_steps`` (1, always
    computed), ``coefficients`` (comma-separated, overrides the adapter's).
    """

    name = "teacache"
    options = frozenset({"threshold", "warmup_steps", "coefficients"})

    def apply(self, module: Any, config: CacheConfig, adapter: CacheAdapter) -> CacheHandle:
        _check_options(config, set(self.options), self.name)
        coefficients = (
            _floats(config.options.get("coefficients"), "coefficients")
            or adapter.teacache_coefficients
        )
        threshold = _option(config, "threshold", 0.2, float)
        warmup = _option(config, "warmup_steps", 1, int)
        blocks = [b for _, b in block_list(module, adapter)]
        hooks = _diffusers_hooks()
        manager = hooks.StateManager(_TeaState, (), {})
        head = _TeaHeadHook(manager, adapter, tuple(coefficients), threshold, warmup)
        hooks.HookRegistry.check_if_exists_or_initialize(blocks[0]).register_hook(head, _TEA_HEAD)
        for i, block in enumerate(blocks[1:], start=1):
            hook = _TeaBlockHook(manager, is_tail=i == len(blocks) - 1)
            hooks.HookRegistry.check_if_exists_or_initialize(block).register_hook(hook, _TEA_BLOCK)
        if len(blocks) == 1:
            head.is_tail = True
        handle = CacheHandle(
            backend=self.name,
            module=module,
            adapter=adapter,
            probe=lambda: not manager.get_state().should_compute,
            options={
                "threshold": threshold,
                "warmup_steps": warmup,
                "coefficients": list(coefficients),
                "coefficients_source": adapter.teacache_source
                if "coefficients" not in config.options
                else "user",
            },
        )
        return _finish_apply(handle, (_TEA_HEAD, _TEA_BLOCK))


_TEA_HEAD = "omni_teacache_head"
_TEA_BLOCK = "omni_teacache_block"


class _TeaState:
    """Per-context TeaCache state: last indicator, accumulated distance, residuals of the stack."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.step = 0
        self.previous_indicator: Any = None
        self.accumulated = 0.0
        self.should_compute = True
        self.head_input: Any = None
        self.head_encoder_input: Any = None
        self.residual: Any = None
        self.encoder_residual: Any = None


def _block_metadata(block: Any) -> Any:
    from diffusers.hooks._helpers import TransformerBlockMetadata, TransformerBlockRegistry
    from diffusers.utils.torch_utils import unwrap_module

    try:
        return TransformerBlockRegistry.get(unwrap_module(block).__class__)
    except ValueError:
        meta = TransformerBlockMetadata(return_hidden_states_index=0)
        meta._cls = type(unwrap_module(block))
        return meta


def _split_output(output: Any, meta: Any) -> tuple[Any, Any]:
    if isinstance(output, tuple):
        enc = (
            output[meta.return_encoder_hidden_states_index]
            if meta.return_encoder_hidden_states_index is not None
            else None
        )
        return output[meta.return_hidden_states_index], enc
    return output, None


def _join_output(hidden: Any, encoder: Any, meta: Any, like: Any) -> Any:
    if meta.return_encoder_hidden_states_index is None:
        return hidden
    size = max(meta.return_hidden_states_index, meta.return_encoder_hidden_states_index) + 1
    out: list[Any] = [None] * size
    out[meta.return_hidden_states_index] = hidden
    out[meta.return_encoder_hidden_states_index] = encoder
    return tuple(out)


def _make_tea_hooks() -> tuple[type, type]:
    hooks = _diffusers_hooks()

    class TeaHeadHook(hooks.ModelHook):
        _is_stateful = True

        def __init__(
            self,
            state_manager: Any,
            adapter: CacheAdapter,
            coefficients: tuple[float, ...],
            threshold: float,
            warmup: int,
        ) -> None:
            super().__init__()
            self.state_manager = state_manager
            self.adapter = adapter
            self.coefficients = coefficients
            self.threshold = threshold
            self.warmup = warmup
            self.is_tail = False
            self.meta: Any = None

        def initialize_hook(self, module: Any) -> Any:
            self.meta = _block_metadata(module)
            return module

        def _indicator(self, module: Any, args: tuple, kwargs: dict) -> Any:
            ind = self.adapter.teacache_indicator
            if callable(ind):
                return ind(module, args, kwargs)
            return self.meta._get_parameter_from_args_kwargs(ind, args, kwargs)

        def _decide(self, state: _TeaState, indicator: Any) -> bool:
            # One scalar read per denoiser call: the skip decision has to be made on the host.
            if (
                state.previous_indicator is None
                or state.step < self.warmup
                or state.residual is None
            ):
                return True
            prev = state.previous_indicator
            rel = (
                (indicator.float() - prev.float()).abs().mean()
                / prev.float().abs().mean().clamp_min(1e-12)
            ).item()
            change = 0.0
            for c in self.coefficients:
                change = change * rel + c
            state.accumulated += abs(change)
            if state.accumulated < self.threshold:
                return False
            return True

        def new_forward(self, module: Any, *args: Any, **kwargs: Any) -> Any:
            state: _TeaState = self.state_manager.get_state()
            indicator = self._indicator(module, args, kwargs).detach()
            compute = self._decide(state, indicator)
            state.should_compute = compute
            state.previous_indicator = indicator
            state.step += 1
            hidden = self.meta._get_parameter_from_args_kwargs("hidden_states", args, kwargs)
            encoder = None
            if self.meta.return_encoder_hidden_states_index is not None:
                encoder = self.meta._get_parameter_from_args_kwargs(
                    "encoder_hidden_states", args, kwargs
                )
            if not compute:
                out_hidden = hidden + state.residual
                out_encoder = (
                    encoder + state.encoder_residual
                    if encoder is not None and state.encoder_residual is not None
                    else encoder
                )
                return _join_output(out_hidden, out_encoder, self.meta, None)
            state.accumulated = 0.0
            state.head_input = hidden
            state.head_encoder_input = encoder
            output = self.fn_ref.original_forward(*args, **kwargs)
            if self.is_tail:
                out_hidden, out_encoder = _split_output(output, self.meta)
                state.residual = out_hidden - hidden
                state.encoder_residual = None if encoder is None else out_encoder - encoder
            return output

        def reset_state(self, module: Any) -> Any:
            self.state_manager.reset()
            return module

    class TeaBlockHook(hooks.ModelHook):
        def __init__(self, state_manager: Any, is_tail: bool = False) -> None:
            super().__init__()
            self.state_manager = state_manager
            self.is_tail = is_tail
            self.meta: Any = None

        def initialize_hook(self, module: Any) -> Any:
            self.meta = _block_metadata(module)
            return module

        def new_forward(self, module: Any, *args: Any, **kwargs: Any) -> Any:
            state: _TeaState = self.state_manager.get_state()
            if not state.should_compute:
                # The head already returned the cached result: pass the inputs through.
                hidden = self.meta._get_parameter_from_args_kwargs("hidden_states", args, kwargs)
                encoder = None
                if self.meta.return_encoder_hidden_states_index is not None:
                    encoder = self.meta._get_parameter_from_args_kwargs(
                        "encoder_hidden_states", args, kwargs
                    )
                return _join_output(hidden, encoder, self.meta, None)
            output = self.fn_ref.original_forward(*args, **kwargs)
            if self.is_tail:
                out_hidden, out_encoder = _split_output(output, self.meta)
                state.residual = out_hidden - state.head_input
                state.encoder_residual = (
                    None
                    if state.head_encoder_input is None or out_encoder is None
                    else out_encoder - state.head_encoder_input
                )
            return output

    return TeaHeadHook, TeaBlockHook


class _LazyHook:
    """Build the ModelHook subclasses on first use, so importing this module needs no diffusers."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _make_tea_hooks_cached()[self.index](*args, **kwargs)


_TEA_HOOKS: tuple[type, type] | None = None


def _make_tea_hooks_cached() -> tuple[type, type]:
    global _TEA_HOOKS
    if _TEA_HOOKS is None:
        _TEA_HOOKS = _make_tea_hooks()
    return _TEA_HOOKS


_TeaHeadHook = _LazyHook(0)
_TeaBlockHook = _LazyHook(1)


class DBCache(CacheBackend):
    """cache-dit's DBCache (dual block cache): Fn compute blocks, Bn residual blocks, dynamic skip.

    Needs the optional ``cache-dit`` package. Options are passed to ``cache_dit.DBCacheConfig``
    (``Fn_compute_blocks``, ``Bn_compute_blocks``, ``residual_diff_threshold``, ...).
    """

    name = "dbcache"

    def apply(self, module: Any, config: CacheConfig, adapter: CacheAdapter) -> CacheHandle:
        availability = dbcache_available()
        if not availability.available:
            raise ConfigError(f"cache 'dbcache' cannot run here: {availability.reason}")
        import cache_dit  # type: ignore[import-not-found]

        blocks = block_list(module, adapter)
        list_name = blocks[0][0].split(".")[0]
        try:
            cache_config = cache_dit.DBCacheConfig(**dict(config.options))
            cache_dit.enable_cache(
                cache_dit.BlockAdapter(
                    transformer=module,
                    blocks=getattr(module, list_name),
                    forward_pattern=cache_dit.ForwardPattern.Pattern_0
                    if adapter.architecture.startswith("QwenImage")
                    else cache_dit.ForwardPattern.Pattern_2,
                ),
                cache_config=cache_config,
            )
        except Exception as exc:
            raise ConfigError(f"cache 'dbcache': cache-dit refused the model: {exc}") from exc

        def probe() -> bool:  # cache-dit keeps its own counters; see handle.options["stats"]
            return False

        def remove() -> None:
            cache_dit.disable_cache(module)

        handle = CacheHandle(
            backend=self.name,
            module=module,
            adapter=adapter,
            probe=probe,
            options=dict(config.options),
        )
        handle._remove = remove
        return handle


def dbcache_available() -> Availability:
    """cache-dit is an optional extra; say so when it is missing."""
    if importlib.util.find_spec("cache_dit") is None:
        return Availability.no("cache-dit not installed (pip install cache-dit)")
    return Availability.yes()


def diffusers_hooks_available() -> Availability:
    """diffusers' hook machinery, new enough for per-request cache contexts."""
    if importlib.util.find_spec("diffusers") is None:
        return Availability.no("diffusers not installed")
    from diffusers.hooks import hooks as diffusers_hooks

    missing = _hooks_api_gap(diffusers_hooks)
    if missing:
        return Availability.no(_old_diffusers_message(missing))
    return Availability.yes()


def apply_cache(
    module: Any,
    config: CacheConfig,
    *,
    pipeline_cls: Any = None,
    registry: Any = None,
    allowed: tuple[str, ...] = (),
) -> CacheHandle | None:
    """Apply the configured cache backend (``config.backend``) to ``module``; None when unset."""
    if not config.backend:
        return None
    if registry is None:
        from omni_core.plugins import get_registry

        registry = get_registry()
    spec = registry.cache_backends.get(config.backend)
    if spec is None:
        known = ", ".join(sorted(registry.cache_backends)) or "none"
        raise ConfigError(
            f"cache.backend: unknown cache backend {config.backend!r}; known: {known}"
        )
    if allowed and config.backend not in allowed:
        raise ConfigError(
            f"cache.backend: {config.backend!r} is not supported by this pipeline "
            f"(supported: {', '.join(allowed)})"
        )
    if spec.availability is not None:
        availability = load_object(spec.availability)()
        if not availability.available:
            raise ConfigError(
                f"cache.backend: {config.backend!r} cannot run here: {availability.reason}"
            )
    backend_cls = spec.load()
    backend = backend_cls() if isinstance(backend_cls, type) else backend_cls
    adapter = resolve_adapter(module, pipeline_cls)
    handle = backend.apply(module, config, adapter)
    handle.lossy = spec.lossy
    return handle
