"""Registers the generic diffusers adapter (a fallback pipeline) with lazy spec strings.

The adapter itself lives in :mod:`omni_core.diffusion.generic`; this hook module stays
tiny so that ``omni list-plugins`` imports nothing of the pipeline runtime.
"""

from __future__ import annotations

from collections.abc import Callable

from omni_core import PLUGIN_API_VERSION, PipelineCapabilities, PipelineSpec, hookimpl

OMNI_PLUGIN_API = PLUGIN_API_VERSION

_IMPL = "omni_core.diffusion.generic"


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
