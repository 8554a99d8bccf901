"""omni plugin entry point of omni-hunyuan-video: registers the HunyuanVideo-1.5 text- and
image-to-video pipelines and what acceleration needs to know about their transformer (lazily:
no torch import)."""

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
            name="hunyuan-video-1.5-t2v",
            implementation="omni_hunyuan_video.pipeline:HunyuanVideoPipeline",
            tasks=("t2v",),
            architectures=("HunyuanVideo15Pipeline",),
            extras="omni_hunyuan_video.extras:HunyuanVideoExtras",
            # No CFG-parallel or Ulysses plan yet: one process per model.
            capabilities=PipelineCapabilities(step_batching=True),
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
            capabilities=PipelineCapabilities(step_batching=True),
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
            "blocks (compile and quantization scope).",
        )
    )
