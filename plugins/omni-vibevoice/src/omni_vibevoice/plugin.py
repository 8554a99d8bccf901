"""omni entry point of omni-vibevoice: registers the speech pipeline `vibevoice`.

This module is imported by `omni list-plugins`: it must import nothing heavy (no torch, no
transformers). The spec points at its implementation lazily ("module:attr").

One hook makes the whole contract of a speech plugin, ``omni_register_pipelines``: the pipeline,
the checkpoints it serves (config.json ``architectures``), its task (``tts``: served at
``/v1/audio/speech``) and its capabilities (what the engine and ``Omni(...)`` may do with it).
"""

from __future__ import annotations

from collections.abc import Callable

from omni_core import PLUGIN_API_VERSION, PipelineCapabilities, PipelineSpec, hookimpl

OMNI_PLUGIN_API = PLUGIN_API_VERSION


@hookimpl
def omni_register_pipelines(register: Callable[[PipelineSpec], None]) -> None:
    register(
        PipelineSpec(
            name="vibevoice",
            tasks=("tts",),
            # Checkpoints whose config.json `architectures` lists this are served by this pipeline.
            architectures=("VibeVoiceForConditionalGeneration",),
            implementation="omni_vibevoice.pipeline:VibeVoicePipeline",
            # Streamed chunk by chunk; concurrent requests share every decode step.
            capabilities=PipelineCapabilities(streaming=True, step_batching=True),
            description="VibeVoice: long-form multi-speaker speech, a diffusion head over an LLM.",
        )
    )
