"""omni plugin entry point of omni-zimage: registers the Z-Image pipeline, what acceleration needs
to know about its transformer, and its benchmark workloads (lazily: no torch is imported here)."""

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
            name="z-image",
            implementation="omni_zimage.pipeline:ZImagePipeline",
            tasks=("t2i",),
            architectures=("ZImagePipeline",),
            extras="omni_zimage.extras:ZImageExtras",
            # CFG-parallel: the core's batch split of the stacked rows (RowForward); Ulysses:
            # the denoiser's sequence plan. first-block and taylorseer are the step caches that
            # need no per-model calibration.
            capabilities=PipelineCapabilities(
                step_batching=True,
                cfg_parallel=True,
                sequence_parallel=True,
                cache_backends=("first-block", "taylorseer"),
            ),
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


@hookimpl
def omni_register_benchmarks(register: Callable[[BenchmarkSpec], None]) -> None:
    for name, attr, tiny, description in (
        ("z-image-turbo-1024", "Z_IMAGE_TURBO_1024", False, "Z-Image-Turbo 1024x1024, 9 steps"),
        ("tiny-z-image", "TINY", True, "tiny Z-Image layout (CPU smoke test)"),
    ):
        register(
            BenchmarkSpec(
                name=name,
                pipeline="z-image",
                tiny=tiny,
                implementation=f"omni_zimage.bench:{attr}",
                description=description,
            )
        )
