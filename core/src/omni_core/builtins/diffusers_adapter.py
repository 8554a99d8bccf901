"""Registers the generic diffusers adapter (a fallback pipeline) with lazy spec strings.

The adapter itself lives in :mod:`omni_core.diffusion.generic`; this hook module stays tiny so that
``omni list-plugins`` imports nothing of the pipeline runtime. The adapter's public names remain
importable from here (resolved lazily on first access).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omni_core import PLUGIN_API_VERSION, PipelineCapabilities, PipelineSpec, hookimpl

OMNI_PLUGIN_API = PLUGIN_API_VERSION

_IMPL = "omni_core.diffusion.generic"
_LAZY = frozenset(
    {"AdapterExtras", "DiffusersAdapterPipeline", "RESERVED", "SHARED_TO_CALL", "check_request"}
)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_IMPL), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def omni_register_pipelines(register: Callable[[PipelineSpec], None]) -> None:
    register(
        PipelineSpec(
            name="diffusers",
            implementation=f"{_IMPL}:DiffusersAdapterPipeline",
            tasks=("t2i", "i2i", "t2v", "i2v"),
            architectures=("*",),
            fallback=True,
            capabilities=PipelineCapabilities(step_batching=False),
            description="Generic adapter: any diffusers pipeline without a first-class plugin "
            "(one request at a time, attention routed where the model allows).",
        )
    )
