"""omni plugin entry point of omni-stable-audio: registers the Stable Audio pipeline (task
``t2a``: served on ``POST /v1/audio/generate``), what acceleration needs to know about its
DiT and the benchmark workloads (lazily: no torch is imported here)."""

from __future__ import annotations

from collections.abc import Callable

from omni_core import (
    PLUGIN_API_VERSION,
    BenchmarkSpec,
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
            # CFG-parallel: the core's batch split of the [uncond; cond] rows. first-block and
            # taylorseer are the step caches that need no per-model calibration. No Ulysses
            # plan: see omni_stable_audio.denoiser.
            capabilities=PipelineCapabilities(
                step_batching=True,
                cfg_parallel=True,
                cache_backends=("first-block", "taylorseer"),
            ),
            description="Stable Audio Open text to audio (sound effects, music): stereo 44.1 "
            "kHz clips of up to 47 s, CFG with guidance_scale > 1.",
        )
    )


@hookimpl
def omni_register_denoisers(register: Callable[[DenoiserSpec], None]) -> None:
    register(
        DenoiserSpec(
            name="stable-audio-dit",
            # StableAudioLoraDiT: the class with diffusers' PEFT mixin the pipeline loads
            architectures=("StableAudioDiTModel", "StableAudioLoraDiT"),
            implementation="omni_stable_audio.denoiser:stable_audio_adapter",
            description="diffusers' StableAudioDiTModel: its transformer_blocks (compile, "
            "quantization and step-cache scope; LoRA through diffusers' PEFT integration).",
        )
    )


@hookimpl
def omni_register_benchmarks(register: Callable[[BenchmarkSpec], None]) -> None:
    for name, attr, tiny, description in (
        ("stable-audio-open-10s", "STABLE_AUDIO_OPEN_10S", False, "Stable Audio Open, 10 s"),
        ("tiny-stable-audio", "TINY", True, "tiny Stable Audio layout (CPU smoke test)"),
    ):
        register(
            BenchmarkSpec(
                name=name,
                pipeline="stable-audio",
                tiny=tiny,
                implementation=f"omni_stable_audio.bench:{attr}",
                description=description,
            )
        )
