"""The plugin-author kit: isolated plugin hosts, checks that a plugin package is sound, and what a
plugin's tests need of omni beyond the public faces.

Used through the pytest plugin (:mod:`omni_core.testing.pytest_plugin`, loaded automatically when
omni-core is installed) or directly::

    from omni_core.testing import assert_plugin_discoverable
    registry = assert_plugin_discoverable("omni-my-plugin")

Here: hosts (:func:`isolated_host`, :func:`installed_host`, :func:`register_plugin`,
:func:`write_distribution`) and package checks (:func:`assert_plugin_discoverable`,
:func:`assert_package_imports_sound`, :func:`assert_imports_only_faces`). One module per job,
each name listed once below and imported on first use: :mod:`.cli` (``omni`` in this process),
:mod:`.pipelines` (a pipeline class driven directly), :mod:`.media` (omni's audio and video
files), :mod:`.memory` (offload and VAE tiling against diffusers), :mod:`.platforms` (the
platform the core selects), :mod:`.kernels` (the attention dispatcher, the quantizer entry),
:mod:`.serving` (a server's job store and metrics), :mod:`.services` (throwaway servers and
processes), :mod:`.lora` (tiny LoRA files), :mod:`.graphs` (a CUDA-graph runner's capture path
on the CPU), :mod:`.imports` (a package's import graph). Tests use this kit and the faces,
never omni's internals.

Nothing here imports torch until a helper that runs a model is called.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import re
import textwrap
from collections.abc import Iterator, Mapping
from importlib import metadata
from pathlib import Path
from types import ModuleType

from omni_core.contract.errors import PluginError
from omni_core.contract.faces import Face
from omni_core.contract.host import ENTRY_POINT_GROUP, PluginHost, set_host
from omni_core.contract.registry import Registry, Spec

_face = Face(
    __name__,
    {
        "omni_core.testing.faces": (
            "PUBLIC_FACES",
            "assert_imports_only_faces",
            "non_face_imports",
        ),
        "omni_core.testing.cli": ("run_cli",),
        "omni_core.testing.pipelines": (
            "pipeline_options",
            "run_queued_together",
            "run_to_completion",
        ),
        "omni_core.testing.media": (
            "read_audio",
            "write_audio",
            "read_video",
            "read_video_sound",
        ),
        "omni_core.testing.memory": ("weight_bytes", "vae_tiling_kwargs"),
        "omni_core.testing.platforms": (
            "Selection",
            "select_platform",
            "check_available",
            "current_platform",
        ),
        "omni_core.testing.kernels": (
            "attention_router",
            "use_router",
            "dispatch_attention",
            "backend_availability",
            "quantize_components",
        ),
        "omni_core.testing.serving": ("open_job_store", "serve_on_thread", "server_metrics"),
        "omni_core.testing.services": (
            "free_port",
            "omni_command",
            "spawn",
            "wait_until",
            "find_postgres",
            "postgres_server",
            "s3_server",
            "make_bucket",
        ),
        "omni_core.testing.lora": ("build_tiny_lora", "lora_header"),
        "omni_core.testing.graphs": ("emulate_graph_capture",),
        "omni_core.testing.imports": (
            "assert_package_imports_sound",
            "import_graph",
            "import_cycles",
        ),
    },
)
__getattr__ = _face.getattr

__all__ = sorted(
    [
        "PluginHost",
        "assert_plugin_discoverable",
        "installed_host",
        "isolated_host",
        "register_plugin",
        "validate_spec_references",
        "write_distribution",
        *_face.names,
    ]
)


def __dir__() -> list[str]:
    return list(__all__)


@contextlib.contextmanager
def isolated_host(*, builtins: bool = True, strict: bool = False) -> Iterator[PluginHost]:
    """A fresh host with autoload off, made the process-wide host for the block, then restored.

    Installed plugins never leak in (no entry points are read), whatever ``OMNI_*`` says; the
    platform selection cache is reset on entry and exit so it follows the isolated registry.
    """
    from omni_core.contract import platforms

    host = PluginHost(autoload=False, allow=None, trace=False, builtins=builtins, strict=strict)
    previous = set_host(host)
    platforms.reset_platform()
    try:
        yield host
    finally:
        set_host(previous)
        platforms.reset_platform()


def installed_host(*names: str, builtins: bool = True) -> PluginHost:
    """A host that discovers the installed plugins named (entry-point or distribution names)
    through their entry points, as ``omni`` does, and no others: what discovery records of a
    plugin (``host.plugins[name]``: ``status``, ``distribution``, ``provides``) is then the
    installed package's. Not made the process-wide host (:func:`isolated_host` is)."""
    return PluginHost(autoload=True, allow=list(names), trace=False, builtins=builtins)


def register_plugin(
    host: PluginHost, plugin: object | ModuleType, name: str | None = None, *, strict: bool = True
) -> Registry:
    """Register ``plugin`` (an object or module with hook implementations) and build the registry.

    With ``strict`` (the default) any problem (unknown hook, failing hook, duplicate name)
    raises :class:`~omni_core.contract.errors.PluginError` with the host's message.
    """
    name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
    info = host.register_object(name, plugin)
    registry = host.registry
    if strict and info.status != "ok":
        raise PluginError(f"plugin {name!r}: {info.error}")
    return registry


def _reference_problem(reference: str) -> str | None:
    module_name = reference.partition(":")[0]
    try:
        found = importlib.util.find_spec(module_name)
    except ModuleNotFoundError:
        found = None
    except (ImportError, ValueError) as exc:
        return f"{reference!r}: cannot look up module {module_name!r}: {exc}"
    if found is None:
        return f"{reference!r}: module {module_name!r} does not exist"
    return None


def validate_spec_references(spec: Spec) -> list[str]:
    """Problems with a spec's lazy ``"module:attr"`` references (their modules must exist).

    Modules are located, not imported, so the check stays cheap and never imports torch.
    """
    problems = []
    for field in ("implementation", "availability", "detector", "extras"):
        reference = getattr(spec, field, None)
        if reference:
            problem = _reference_problem(reference)
            if problem:
                problems.append(f"{spec.kind} {spec.name!r}.{field}: {problem}")
    return problems


def assert_plugin_discoverable(name: str) -> Registry:
    """Assert that an installed plugin is found through the ``omni`` entry-point group, loads
    cleanly in strict mode (right plugin API, known hooks, valid specs, no name clashes with the
    built-ins) and that every spec it registers points at modules that exist.

    ``name`` is the entry-point name or the distribution name. Returns the registry built from
    the built-ins plus this plugin only.
    """
    found = [
        ep
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)
        if name in (ep.name, ep.dist.metadata["Name"] if ep.dist is not None else None)
    ]
    if not found:
        raise AssertionError(
            f"no entry point in group {ENTRY_POINT_GROUP!r} is named {name!r} or belongs to "
            f"distribution {name!r}; is the package installed (pip install -e .) and does its "
            f'pyproject.toml declare [project.entry-points.omni] {name} = "<module>"?'
        )
    with isolated_host(strict=True) as host:
        registry: Registry | None = None
        for ep in found:
            try:
                module = ep.load()
            except Exception as exc:
                raise AssertionError(
                    f"plugin {ep.name!r}: importing {ep.value} failed: {type(exc).__name__}: {exc}"
                ) from exc
            try:
                host.load_module(ep.name, module)
                registry = host.registry
            except PluginError as exc:
                raise AssertionError(f"plugin {ep.name!r} is broken: {exc}") from exc
        assert registry is not None
        problems = [
            problem
            for spec in registry
            if spec.plugin in {ep.name for ep in found}
            for problem in validate_spec_references(spec)
        ]
        if problems:
            raise AssertionError("; ".join(problems))
        return registry


def write_distribution(
    root: Path,
    dist: str,
    modules: Mapping[str, str],
    *,
    entry_points: Mapping[str, str] | None = None,
    version: str = "0.1.0",
) -> Path:
    """Write modules plus a ``<dist>.dist-info`` (METADATA, entry_points.txt) under ``root``.

    With ``root`` on ``sys.path`` this is a real installed distribution as far as
    ``importlib.metadata`` is concerned (a real ``omni`` entry point, no pip needed): the way to
    test discovery, broken imports and API mismatches. ``modules`` maps dotted module names to
    source; ``entry_points`` maps entry-point names to module names (default: ``{dist: first
    module}``).
    """
    root = Path(root)
    for module_name, source in modules.items():
        path = root.joinpath(*module_name.split("."))
        parents = module_name.split(".")[:-1]
        for i in range(1, len(parents) + 1):
            init = root.joinpath(*parents[:i], "__init__.py")
            init.parent.mkdir(parents=True, exist_ok=True)
            init.touch()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".py").write_text(textwrap.dedent(source), encoding="utf-8")
    if entry_points is None:
        entry_points = {dist: next(iter(modules))}
    info = root / f"{re.sub(r'[-.]+', '_', dist)}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8"
    )
    lines = [f"[{ENTRY_POINT_GROUP}]"] + [f"{k} = {v}" for k, v in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    importlib.invalidate_caches()
    return info
