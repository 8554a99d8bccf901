"""Plugin discovery and loading: built-ins plus the ``omni`` entry-point group.

One broken plugin never takes the core down: it is recorded with its error (shown by
``omni list-plugins``) and everything else keeps working. Environment switches:

- ``OMNI_LOAD_PLUGINS=a,b``: load only these entry-point plugins (by entry-point or distribution
  name); an empty value loads none.
- ``OMNI_DISABLE_PLUGIN_AUTOLOAD=1``: load no entry-point plugins at all (built-ins still load).
- ``OMNI_TRACE_PLUGINS=1``: print every hook call to stderr.
"""

from __future__ import annotations

import difflib
import os
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any, Literal

import pluggy

from omni_core.contract import hookspecs
from omni_core.contract.errors import PluginError, RegistrationError
from omni_core.contract.registry import SPEC_TYPES, Registry, Spec

ENTRY_POINT_GROUP = "omni"

#: Built-in plugins, registered through the same hooks as everything else.
BUILTIN_PLUGINS: dict[str, str] = {
    "omni-platforms": "omni_core.builtins.platforms",
    "omni-attention": "omni_core.builtins.attention",
    "omni-attention-extra": "omni_core.builtins.attention_extra",
    "omni-cache": "omni_core.builtins.cache",
    "omni-quantizers": "omni_core.builtins.quantizers",
    "omni-diffusers-adapter": "omni_core.builtins.diffusers_adapter",
}

Status = Literal["ok", "error"]


@dataclass
class PluginInfo:
    """What `omni list-plugins` shows about one plugin."""

    name: str
    module: str
    distribution: str | None = None
    version: str | None = None
    builtin: bool = False
    status: Status = "ok"
    error: str | None = None
    api_version: str | None = None
    hooks: list[str] = field(default_factory=list)
    provides: dict[str, list[str]] = field(default_factory=dict)
    #: Errors found while loading (import, API version, hooks); they survive registry rebuilds.
    load_errors: list[str] = field(default_factory=list, repr=False)

    def fail(self, message: str, *, at_load: bool = True) -> None:
        """Mark the plugin broken. ``at_load=False``: an error of one registry build only."""
        if at_load:
            self.load_errors.append(message)
        self.status = "error"
        self.error = message if self.error is None else f"{self.error}; {message}"

    def reset_build_errors(self) -> None:
        """Forget errors of a previous registry build (keep the load errors)."""
        self.error = "; ".join(self.load_errors) or None
        self.status = "error" if self.load_errors else "ok"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "module": self.module,
            "distribution": self.distribution,
            "version": self.version,
            "builtin": self.builtin,
            "status": self.status,
            "error": self.error,
            "api_version": self.api_version,
            "hooks": list(self.hooks),
            "provides": {k: list(self.provides.get(k, ())) for k in SPEC_TYPES},
        }


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _trace(message: str) -> None:
    print(f"omni-trace: {message}", file=sys.stderr, flush=True)


def _parse_api(version: str) -> tuple[int, int]:
    major, _, minor = version.strip().partition(".")
    return int(major), int(minor or 0)


def api_compatible(declared: str, provided: str) -> bool:
    """A plugin built for API ``M.m`` loads on core ``M.n`` with ``n >= m``.

    Same major: the hook signatures and spec fields it uses exist. A newer minor on the plugin's
    side may use fields this core lacks, so it is refused too. Unparseable versions are refused.
    """
    try:
        d_major, d_minor = _parse_api(declared)
        p_major, p_minor = _parse_api(provided)
    except ValueError:
        return False
    return d_major == p_major and d_minor <= p_minor


class PluginHost:
    """A pluggy manager, the plugins it loaded (good and broken) and the registry they built."""

    def __init__(
        self,
        *,
        autoload: bool | None = None,
        allow: Iterable[str] | None = None,
        trace: bool | None = None,
        builtins: bool = True,
        strict: bool = False,
    ) -> None:
        from omni_core.contract.version import PLUGIN_API_VERSION

        self.api_version = PLUGIN_API_VERSION
        self.strict = strict
        self.trace = _env_flag("OMNI_TRACE_PLUGINS") if trace is None else trace
        if autoload is None:
            autoload = not _env_flag("OMNI_DISABLE_PLUGIN_AUTOLOAD")
        if allow is None and "OMNI_LOAD_PLUGINS" in os.environ:
            allow = [a.strip() for a in os.environ["OMNI_LOAD_PLUGINS"].split(",") if a.strip()]
        self.allow = None if allow is None else set(allow)
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        self._registry: Registry | None = None
        self._lock = threading.Lock()
        if builtins:
            for name, module_name in BUILTIN_PLUGINS.items():
                self.load_module(name, module_name, builtin=True)
        if autoload:
            self.load_entry_points()

    # -- loading -------------------------------------------------------------------------------
    def load_entry_points(self) -> None:
        for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            dist = ep.dist
            dist_name = dist.metadata["Name"] if dist is not None else None
            if self.allow is not None and not ({ep.name, dist_name} & self.allow):
                continue
            info = PluginInfo(
                name=ep.name,
                module=ep.value,
                distribution=dist_name,
                version=dist.version if dist is not None else None,
            )
            if ep.name in self.plugins:
                taken_by = self.plugins[ep.name].module
                info.fail(f"plugin name {ep.name!r} is already taken by {taken_by}")
                self.plugins[f"{ep.name} ({dist_name})"] = info
                continue
            self.plugins[ep.name] = info
            if self.trace:
                _trace(f"loading plugin {ep.name!r} from {ep.value}")
            try:
                module = ep.load()
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                info.fail(f"failed to import {ep.value}: {type(exc).__name__}: {exc}")
                continue
            self._register(module, info)
        self._registry = None

    def load_module(
        self, name: str, module: ModuleType | str, *, builtin: bool = False
    ) -> PluginInfo:
        """Register a module (or an importable module name) as a plugin called ``name``."""
        if isinstance(module, str):
            import importlib

            module_name = module
            try:
                module = importlib.import_module(module)
            except Exception as exc:  # noqa: BLE001
                info = PluginInfo(name=name, module=module_name, builtin=builtin)
                info.fail(f"failed to import {module_name}: {type(exc).__name__}: {exc}")
                self.plugins[name] = info
                return info
        module_name = getattr(module, "__name__", repr(module))
        info = PluginInfo(name=name, module=module_name, builtin=builtin)
        if builtin:
            from omni_core.contract.version import __version__

            info.distribution, info.version = "omni-core", __version__
        self.plugins[name] = info
        self._register(module, info)
        self._registry = None
        return info

    def register_object(self, name: str, plugin: object) -> PluginInfo:
        """Register any object or module with hook implementations (tests, throwaway plugins)."""
        if name in self.plugins:
            raise PluginError(f"a plugin named {name!r} is already loaded")
        module = plugin.__name__ if isinstance(plugin, ModuleType) else type(plugin).__module__
        info = PluginInfo(name=name, module=module)
        self.plugins[name] = info
        self._register(plugin, info)
        self._registry = None
        return info

    def _register(self, plugin: object, info: PluginInfo) -> None:
        declared = getattr(plugin, "OMNI_PLUGIN_API", None)
        if declared is not None:
            info.api_version = str(declared)
            if not api_compatible(str(declared), self.api_version):
                info.fail(
                    f"built for omni plugin API {declared}, but this omni-core provides "
                    f"{self.api_version}; install a version of {info.distribution or info.name} "
                    "made for it"
                )
                return self._maybe_raise(info)
        unknown = []
        for attr in dir(plugin):
            if self.pm.parse_hookimpl_opts(plugin, attr) is None:
                if attr in hookspecs.ALL_HOOKS and callable(getattr(plugin, attr, None)):
                    # Named like a hook but not marked: pluggy would silently ignore it.
                    unknown.append(f"{attr!r} (not marked with @hookimpl)")
                continue
            if attr not in hookspecs.ALL_HOOKS:
                close = difflib.get_close_matches(attr, hookspecs.ALL_HOOKS, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                unknown.append(f"{attr!r}{hint}")
            else:
                info.hooks.append(attr)
        if unknown:
            info.fail(f"plugin {info.name!r} has bad hook implementation(s): {', '.join(unknown)}")
            info.hooks.clear()
            return self._maybe_raise(info)
        try:
            self.pm.register(plugin, name=info.name)
        except Exception as exc:  # noqa: BLE001 - pluggy validation (bad hook signature, ...)
            info.fail(f"plugin {info.name!r} was rejected: {exc}")
            info.hooks.clear()
            return self._maybe_raise(info)

    def _maybe_raise(self, info: PluginInfo) -> None:
        if self.strict:
            raise PluginError(info.error or f"plugin {info.name!r} failed")

    # -- the registry --------------------------------------------------------------------------
    @property
    def registry(self) -> Registry:
        """Specs from every loaded plugin (built lazily, once)."""
        with self._lock:
            if self._registry is None:
                self._registry = self._build_registry()
            return self._registry

    def _call_each(self, hook_name: str, make_args: Callable[[str], dict[str, Any]]) -> None:
        """Call one hook implementation at a time so that each result is tied to its plugin."""
        caller = getattr(self.pm.hook, hook_name)
        for impl in caller.get_hookimpls():
            plugin_name = impl.plugin_name
            info = self.plugins.get(plugin_name)
            if info is not None and info.status != "ok":
                continue
            if self.trace:
                _trace(f"{plugin_name}.{hook_name}()")
            try:
                impl.function(**make_args(plugin_name))
            except Exception as exc:
                message = f"{hook_name} failed: {type(exc).__name__}: {exc}"
                if info is None:
                    raise
                # Registry-build errors are recomputed on each build; a command hook runs once.
                info.fail(message, at_load=hook_name == "omni_register_commands")
                self._maybe_raise(info)

    def _build_registry(self) -> Registry:
        for info in self.plugins.values():
            info.reset_build_errors()
        registry = Registry()
        pending: dict[str, list[Spec]] = {}
        for hook_name, kind in hookspecs.COLLECTION_HOOKS.items():

            def make_args(
                plugin_name: str, kind: str = kind, hook_name: str = hook_name
            ) -> dict[str, Any]:
                def register(spec: Spec) -> None:
                    if not isinstance(spec, Spec) or spec.kind != kind:
                        raise RegistrationError(
                            f"{hook_name} must register {kind} specs, got {type(spec).__name__}"
                        )
                    if self.trace:
                        _trace(f"  {plugin_name} registered {kind} {spec.name!r}")
                    pending.setdefault(plugin_name, []).append(spec)

                return {"register": register}

            self._call_each(hook_name, make_args)

        # Built-ins first, then plugins by name; plugins that override something come after
        # those that do not, so an override replaces its target whatever the names sort to.
        def order_key(name: str) -> tuple[bool, bool, str]:
            info = self.plugins.get(name)
            overrides = any(spec.overrides for spec in pending[name])
            return (not (info.builtin if info else False), overrides, name)

        for plugin_name in sorted(pending, key=order_key):
            info = self.plugins.get(plugin_name)
            if info is not None and info.status != "ok":
                continue
            # All or nothing per plugin: a plugin with one conflicting spec adds none.
            snapshot = {kind: dict(table) for kind, table in registry.specs.items()}
            try:
                for spec in pending[plugin_name]:
                    registry.add(spec, plugin_name)
            except RegistrationError as exc:
                registry.specs = snapshot
                if info is None or self.strict:
                    raise
                info.fail(str(exc), at_load=False)
        for name, info in self.plugins.items():
            info.provides = registry.by_plugin(name)
        return registry

    def add_commands(self, cli: Any) -> None:
        """Let plugins add CLI commands; a failing plugin is reported, the CLI still works."""
        self._call_each("omni_register_commands", lambda _name: {"cli": cli})

    def infos(self) -> list[PluginInfo]:
        self.registry  # noqa: B018 - fills `provides` and registration errors
        return sorted(self.plugins.values(), key=lambda i: (not i.builtin, i.name))


_HOST: PluginHost | None = None
_HOST_LOCK = threading.Lock()


def get_host() -> PluginHost:
    """The process-wide plugin host, loaded once."""
    global _HOST
    with _HOST_LOCK:
        if _HOST is None:
            _HOST = PluginHost()
        return _HOST


def set_host(host: PluginHost | None) -> PluginHost | None:
    """Swap the process-wide host (the testing kit uses this); returns the previous one."""
    global _HOST
    with _HOST_LOCK:
        previous, _HOST = _HOST, host
        return previous


def get_registry() -> Registry:
    return get_host().registry
