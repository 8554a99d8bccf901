"""omni entry point of omni-dia: registers the speech pipeline `dia`.

This module is imported by `omni list-plugins`: it must import nothing heavy (no torch, no
transformers). The spec points at its implementation lazily ("module:attr").
"""

from __future__ import annotations

from collections.abc import Callable

from omni_core import PLUGIN_API_VERSION, PipelineCapabilities, PipelineSpec, hookimpl

OMNI_PLUGIN_API = PLUGIN_API_VERSION


@hookimpl
def omni_register_pipelines(register: Callable[[PipelineSpec], None]) -> None:
    register(
        PipelineSpec(
            name="dia",
            tasks=("tts",),
            # Checkpoints whose config.json `architectures` lists this are served by this pipeline.
            architectures=("DiaForConditionalGeneration",),
            implementation="omni_dia.pipeline:DiaPipeline",
            # Streamed chunk by chunk (with DAC's receptive field as context on both sides);
            # concurrent requests share every decode step.
            capabilities=PipelineCapabilities(streaming=True, step_batching=True),
            description="Dia: dialogue ([S1]/[S2]) text to speech with voice cloning.",
        )
    )
