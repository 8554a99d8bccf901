"""omni plugin entry point of omni-stable-audio: registers the Stable Audio pipeline (task
``t2a``: served on ``POST /v1/audio/generate``) and what acceleration needs to know about its
DiT (lazily: no torch is imported here)."""

from __future__ import annotations

from collections.abc import Callable

from omni_core import (
    PLUGIN_API_VERSION,
    DenoiserSpec,
    PipelineCapabilities,
    PipelineSpec,
    hookimpl,
)

OMNI_PLUGIN_API = PLUGIN_API_VERSION


@hookimpl
def omni_register_pipelines(register: Callable[[PipelineSpec], None]) -> None:
    register(
        PipelineSpec(
            name="stable-audio",
            implementation="omni_stable_audio.pipeline:StableAudioPipeline",
            tasks=("t2a",),
            architectures=("StableAudioPipeline",),
            extras="omni_stable_audio.extras:StableAudioExtras",
            capabilities=PipelineCapabilities(step_batching=True),
            description="Stable Audio Open text to audio (sound effects, music): stereo 44.1 "
            "kHz clips of up to 47 s, CFG with guidance_scale > 1.",
        )
    )


@hookimpl
def omni_register_denoisers(register: Callable[[DenoiserSpec], None]) -> None:
    register(
        DenoiserSpec(
            name="stable-audio-dit",
            architectures=("StableAudioDiTModel",),
            implementation="omni_stable_audio.denoiser:stable_audio_adapter",
            description="diffusers' StableAudioDiTModel: its transformer_blocks (compile and "
            "quantization scope).",
        )
    )
