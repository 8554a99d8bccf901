"""What every step cache shares: the per-request handle, diffusers-hook plumbing, ``apply_cache``.

A cache backend (the ``implementation`` of a :class:`~omni_core.contract.registry.CacheBackendSpec`)
is a :class:`CacheBackend` whose ``apply(module, config, adapter)`` installs its hooks and returns a
:class:`CacheHandle`. The backend is model-agnostic; the *adapter* is the
:class:`~omni_core.diffusion.denoisers.DenoiserAdapter` the denoiser's model plugin registered (its
block lists, TeaCache polynomial, MagCache ratios). Backends build on diffusers' hook machinery
(``diffusers.hooks``), which keeps one state per *cache context*: omni names a context per request
and CFG branch, so concurrent requests never share cached residuals.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import ConfigError
from omni_core.contract.registry import Availability, load_object

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.config import CacheConfig
    from omni_core.contract.registry import Registry
    from omni_core.diffusion.denoisers import DenoiserAdapter


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


# -- diffusers' hook API, checked once per use ------------------------------------------------
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


def diffusers_hooks() -> Any:
    """``diffusers.hooks.hooks``, or a ConfigError naming the diffusers release needed."""
    try:
        from diffusers.hooks import hooks as module
    except ImportError as exc:  # pragma: no cover - diffusers is a runtime dependency
        raise ConfigError("step caches need diffusers (pip install 'omni-core[runtime]')") from exc
    missing = _hooks_api_gap(module)
    if missing:
        raise ConfigError(_old_diffusers_message(missing))
    return module


def diffusers_hooks_available() -> Availability:
    """diffusers' hook machinery, new enough for per-request cache contexts."""
    if importlib.util.find_spec("diffusers") is None:
        return Availability.no("diffusers not installed")
    from diffusers.hooks import hooks as module

    missing = _hooks_api_gap(module)
    if missing:
        return Availability.no(_old_diffusers_message(missing))
    return Availability.yes()


def invalidate_child_registries(registry: Any) -> None:
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


def _state_managers(module: Any) -> Iterator[Any]:
    hooks = diffusers_hooks()
    root = hooks.HookRegistry.check_if_exists_or_initialize(module)
    invalidate_child_registries(root)
    for registry in (root, *_child_registries(root)):
        for hook in registry.hooks.values():
            for attr in vars(hook).values():
                if isinstance(attr, hooks.StateManager):
                    yield attr


# -- the handle a pipeline holds ----------------------------------------------------------------
@dataclass
class CacheHandle:
    """A cache applied to one denoiser: per-context entry, hit counts and cleanup."""

    backend: str
    module: Any
    adapter: DenoiserAdapter
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
        hooks = diffusers_hooks()
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


_COUNTER = "omni_cache_counter"


def _install_counter(module: Any, handle: CacheHandle) -> None:
    hooks = diffusers_hooks()

    class _CountCalls(hooks.ModelHook):
        """Root hook: after each denoiser forward, ask the backend whether it was a cache hit."""

        def new_forward(self, mod: Any, *args: Any, **kwargs: Any) -> Any:
            output = self.fn_ref.original_forward(*args, **kwargs)
            handle.record()
            return output

    registry = hooks.HookRegistry.check_if_exists_or_initialize(module)
    registry.register_hook(_CountCalls(), _COUNTER)


def finish_apply(handle: CacheHandle, hook_names: tuple[str, ...]) -> CacheHandle:
    """Install the hit counter and make ``handle.remove()`` take ``hook_names`` off again."""
    hooks = diffusers_hooks()
    _install_counter(handle.module, handle)
    names = (*hook_names, _COUNTER)

    def remove() -> None:
        registry = hooks.HookRegistry.check_if_exists_or_initialize(handle.module)
        for name in names:
            registry.remove_hook(name, recurse=True)
        invalidate_child_registries(registry)

    handle._remove = remove
    invalidate_child_registries(hooks.HookRegistry.check_if_exists_or_initialize(handle.module))
    return handle


def head_state(block: Any, hook_name: str) -> Callable[[], Any]:
    """The current context's state of the hook ``hook_name`` on ``block`` (for a probe)."""
    hooks = diffusers_hooks()
    registry = hooks.HookRegistry.check_if_exists_or_initialize(block)

    def get() -> Any:
        return registry.get_hook(hook_name).state_manager.get_state()

    return get


# -- option parsing shared by the backends --------------------------------------------------
def check_options(config: CacheConfig, allowed: Iterable[str], backend: str) -> None:
    """Refuse options the backend does not know (a typo must not be silently ignored)."""
    allowed = set(allowed)
    unknown = sorted(set(config.options) - allowed)
    if unknown:
        raise ConfigError(
            f"cache.options: unknown option(s) {', '.join(unknown)} for {backend!r}; "
            f"known: {', '.join(sorted(allowed))}"
        )


def option(config: CacheConfig, key: str, default: Any, kind: type) -> Any:
    """``config.options[key]`` converted to ``kind`` (``default`` when absent)."""
    value = config.options.get(key, default)
    try:
        return kind(value) if value is not None else None
    except (TypeError, ValueError):
        raise ConfigError(f"cache.options.{key}: expected {kind.__name__}, got {value!r}") from None


def floats(text: str | None, key: str) -> tuple[float, ...] | None:
    """Comma-separated numbers (how coefficients and ratios travel through configs)."""
    if text is None:
        return None
    try:
        return tuple(float(x) for x in str(text).replace(" ", "").split(",") if x)
    except ValueError:
        raise ConfigError(f"cache.options.{key}: expected comma-separated numbers") from None


# -- backends -------------------------------------------------------------------------------
class CacheBackend:
    """Base of every cache backend class (the ``implementation`` of a CacheBackendSpec)."""

    name: str = ""
    lossy: bool = True
    options: frozenset[str] = frozenset()

    def apply(self, module: Any, config: CacheConfig, adapter: DenoiserAdapter) -> CacheHandle:
        raise NotImplementedError


def apply_cache(
    module: Any,
    config: CacheConfig,
    *,
    registry: Registry,
    allowed: tuple[str, ...] = (),
    adapter: DenoiserAdapter | None = None,
) -> CacheHandle | None:
    """Apply the configured cache backend (``config.backend``) to ``module``; None when unset.

    ``allowed`` bounds the backends (a pipeline's capabilities; empty: any). ``adapter``
    defaults to the denoiser's registered adapter
    (:func:`omni_core.diffusion.denoisers.resolve_denoiser`).
    """
    if not config.backend:
        return None
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
    if adapter is None:
        from omni_core.diffusion.denoisers import resolve_denoiser

        adapter = resolve_denoiser(module, registry)
    handle = backend.apply(module, config, adapter)
    handle.lossy = spec.lossy
    return handle
