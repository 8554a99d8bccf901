"""`omni doctor MODEL`: which path a checkpoint takes, read from its configs alone.

A folder (or a cached Hub id) is served by the first-class pipeline a plugin registers for the
class its ``model_index.json`` / ``config.json`` declares, else by a fallback pipeline (the
generic diffusers adapter), else by nothing (a clear error naming what is installed). The
report also names, per component, the denoiser spec a plugin registers for its class: that is
what compile scopes, caches, fp8 and parallel plans know about it. No weights are read and torch
is not imported, so the answer is instant even for a 40 GB checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omni_core.contract.registry import Registry
from omni_core.runtime.loading import find_pipeline, read_architectures, resolve_model_path


def component_classes(path: Path) -> dict[str, str]:
    """``{component: class name}`` from a diffusers ``model_index.json`` (empty otherwise)."""
    index = path / "model_index.json"
    if not index.is_file():
        return {}
    try:
        entries = json.loads(index.read_text())
    except json.JSONDecodeError:
        return {}  # read_architectures already reports an unreadable index
    return {
        name: value[1]
        for name, value in entries.items()
        if not name.startswith("_") and isinstance(value, list) and len(value) == 2 and value[1]
    }


def model_route(registry: Registry, model: str) -> dict[str, Any]:
    """Where ``model`` goes: its declared classes, the pipeline and plugin, first-class or
    fallback, and the denoiser spec of each component whose class one describes.

    Raises :class:`~omni_core.contract.errors.ModelNotFoundError` (exit 2) when the model
    cannot be found or no installed pipeline serves it.
    """
    path = resolve_model_path(model)
    architectures = read_architectures(path)
    spec = find_pipeline(registry, path)
    denoisers = []
    for component, class_name in component_classes(path).items():
        denoiser = registry.denoiser_for(class_name)
        if denoiser is not None:
            denoisers.append(
                {
                    "component": component,
                    "class": class_name,
                    "denoiser": denoiser.name,
                    "plugin": denoiser.plugin,
                }
            )
    return {
        "model": model,
        "path": str(path),
        "architectures": architectures,
        "pipeline": spec.name,
        "plugin": spec.plugin,
        "route": "generic adapter" if spec.fallback else "first-class",
        "tasks": list(spec.tasks),
        "denoisers": denoisers,
    }


def render_route(route: dict[str, Any]) -> list[str]:
    """The text lines of ``omni doctor MODEL``'s model section."""
    lines = [
        f"model: {route['model']} ({route['path']})",
        f"  declares: {', '.join(route['architectures'])}",
        f"  pipeline: {route['pipeline']} from {route['plugin']} ({route['route']}; tasks "
        f"{', '.join(route['tasks']) or '-'})",
    ]
    for item in route["denoisers"]:
        lines.append(
            f"  denoiser: {item['component']} ({item['class']}) -> {item['denoiser']} "
            f"from {item['plugin']}"
        )
    if not route["denoisers"]:
        lines.append("  denoiser: no component's class has a registered denoiser spec")
    return lines


__all__ = ["component_classes", "model_route", "render_route"]
