"""omni plugin entry point of omni-zimage: registers the Z-Image pipeline and what acceleration
needs to know about its transformer (lazily: no torch is imported here)."""

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
            name="z-image",
            implementation="omni_zimage.pipeline:ZImagePipeline",
            tasks=("t2i",),
            architectures=("ZImagePipeline",),
            extras="omni_zimage.extras:ZImageExtras",
            # Step batching only: no sequence plan or CFG split for its transformer yet.
            capabilities=PipelineCapabilities(step_batching=True),
            description="Z-Image-Turbo (9 steps, no CFG) and Z-Image (CFG with "
            "guidance_scale > 0) text-to-image, sides in multiples of 16 px.",
        )
    )


@hookimpl
def omni_register_denoisers(register: Callable[[DenoiserSpec], None]) -> None:
    register(
        DenoiserSpec(
            name="z-image-transformer",
            architectures=("ZImageTransformer2DModel",),
            implementation="omni_zimage.denoiser:zimage_adapter",
            description="diffusers' ZImageTransformer2DModel: the noise- and context-refiner "
            "blocks and the main single-stream blocks (compile and quantization scope).",
        )
    )
