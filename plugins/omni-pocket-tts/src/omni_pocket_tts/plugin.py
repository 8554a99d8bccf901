"""omni entry point of omni-pocket-tts: registers the speech pipeline `pocket-tts`.

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
            name="pocket-tts",
            tasks=("tts",),
            # Checkpoints whose config.json `architectures` lists this are served by this pipeline.
            architectures=("PocketTTSForConditionalGeneration",),
            implementation="omni_pocket_tts.pipeline:PocketTTSPipeline",
            # Streamed chunk by chunk (the codec is causal); concurrent requests share every
            # decode step.
            capabilities=PipelineCapabilities(streaming=True, step_batching=True),
            description="Pocket TTS: Kyutai's small text to speech with voice cloning.",
        )
    )
