"""omni plugin entry point of omni-ltx: registers the LTX-2 text- and image-to-video
pipelines (video with its audio track), what acceleration needs to know about their
transformer, and benchmark workloads (lazily: no torch import)."""

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

_IMPL = "omni_ltx.pipeline:LTXPipeline"
_EXTRAS = "omni_ltx.extras:LTXExtras"
# Step batching, CFG-parallel (the batched [cond; uncond] rows split over two ranks), Ulysses
# (the denoiser's sequence plan: video sharded, audio replicated) and the residual step caches
# that replay both of a block's streams (its adapter declares them); fp8 linears and compile
# come through the denoiser spec.
_CAPS = PipelineCapabilities(
    step_batching=True,
    cfg_parallel=True,
    sequence_parallel=True,
    cache_backends=("first-block", "teacache"),
)


@hookimpl
def omni_register_pipelines(register: Callable[[PipelineSpec], None]) -> None:
    register(
        PipelineSpec(
            name="ltx-2-t2v",
            implementation=_IMPL,
            tasks=("t2v",),
            architectures=("LTX2Pipeline",),
            extras=_EXTRAS,
            capabilities=_CAPS,
            description="LTX-2 text to video with its audio track (Lightricks/LTX-2): sides "
            "in multiples of 32 px, 8k+1 frames at the request's fps (24).",
        )
    )
    register(
        PipelineSpec(
            name="ltx-2-i2v",
            implementation=_IMPL,
            tasks=("i2v",),
            architectures=("LTX2ImageToVideoPipeline",),
            extras=_EXTRAS,
            capabilities=_CAPS,
            description="LTX-2 image to video with its audio track: the image is the first frame.",
        )
    )


@hookimpl
def omni_register_denoisers(register: Callable[[DenoiserSpec], None]) -> None:
    register(
        DenoiserSpec(
            name="ltx-2-transformer",
            architectures=("LTX2VideoTransformer3DModel",),
            implementation="omni_ltx.denoiser:ltx2_adapter",
            description="diffusers' LTX2VideoTransformer3DModel: its audio-video blocks "
            "(compile and quantization scope; both streams for the step caches).",
        )
    )


@hookimpl
def omni_register_benchmarks(register: Callable[[BenchmarkSpec], None]) -> None:
    for name, attr, tiny, description in (
        ("ltx-2-512x768x121", "LTX2_512P", False, "LTX-2 512x768, 121 frames at 24 fps"),
        ("ltx-2-512x768x49", "LTX2_512P_SHORT", False, "LTX-2 512x768, 49 frames at 24 fps"),
        ("tiny-ltx-2", "TINY", True, "tiny LTX-2 layout (CPU smoke test)"),
    ):
        register(
            BenchmarkSpec(
                name=name,
                pipeline="ltx-2-t2v",
                tiny=tiny,
                implementation=f"omni_ltx.bench:{attr}",
                description=description,
            )
        )
