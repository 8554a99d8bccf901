"""omni plugin entry point of omni-hunyuan-video: registers the HunyuanVideo-1.5 text- and
image-to-video pipelines, what acceleration needs to know about their transformer and the
benchmark workloads (lazily: no torch import)."""

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
#: CFG-parallel: the core's batch split of the [cond; uncond] rows; Ulysses: the denoiser's
#: sequence plan. first-block and taylorseer are the step caches that need no per-model
#: calibration (TeaCache and MagCache need coefficients).
CAPABILITIES = PipelineCapabilities(
    step_batching=True,
    cfg_parallel=True,
    sequence_parallel=True,
    cache_backends=("first-block", "taylorseer"),
)


@hookimpl
def omni_register_pipelines(register: Callable[[PipelineSpec], None]) -> None:
    register(
        PipelineSpec(
            name="hunyuan-video-1.5-t2v",
            implementation="omni_hunyuan_video.pipeline:HunyuanVideoPipeline",
            tasks=("t2v",),
            architectures=("HunyuanVideo15Pipeline",),
            extras="omni_hunyuan_video.extras:HunyuanVideoExtras",
            capabilities=CAPABILITIES,
            description="HunyuanVideo-1.5 text-to-video (480p / 720p t2v checkpoints), sides "
            "in multiples of 16 px, 4k+1 frames at 24 fps.",
        )
    )
    register(
        PipelineSpec(
            name="hunyuan-video-1.5-i2v",
            implementation="omni_hunyuan_video.pipeline:HunyuanVideoPipeline",
            tasks=("i2v",),
            architectures=("HunyuanVideo15ImageToVideoPipeline",),
            extras="omni_hunyuan_video.extras:HunyuanVideoExtras",
            capabilities=CAPABILITIES,
            description="HunyuanVideo-1.5 image-to-video (480p / 720p i2v checkpoints): the "
            "image's size bucket, 4k+1 frames at 24 fps.",
        )
    )


@hookimpl
def omni_register_denoisers(register: Callable[[DenoiserSpec], None]) -> None:
    register(
        DenoiserSpec(
            name="hunyuan-video-1.5-transformer",
            architectures=("HunyuanVideo15Transformer3DModel",),
            implementation="omni_hunyuan_video.denoiser:hunyuan_video15_adapter",
            description="diffusers' HunyuanVideo15Transformer3DModel: the double-stream "
            "blocks (compile, quantization and step-cache scope).",
        )
    )


@hookimpl
def omni_register_benchmarks(register: Callable[[BenchmarkSpec], None]) -> None:
    for name, attr, tiny, description in (
        (
            "hunyuan-video-1.5-480p-33f",
            "HUNYUAN_VIDEO_480P",
            False,
            "HunyuanVideo-1.5 480x848, 33 frames, 20 steps",
        ),
        ("tiny-hunyuan-video-1.5", "TINY", True, "tiny HunyuanVideo-1.5 layout (CPU smoke test)"),
    ):
        register(
            BenchmarkSpec(
                name=name,
                pipeline="hunyuan-video-1.5-t2v",
                tiny=tiny,
                implementation=f"omni_hunyuan_video.bench:{attr}",
                description=description,
            )
        )
