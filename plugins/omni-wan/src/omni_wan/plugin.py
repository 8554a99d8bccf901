"""omni plugin entry point of omni-wan: registers the Wan pipelines (lazily, no torch import)."""

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

_IMPL = "omni_wan.pipeline:WanVideoPipeline"
_EXTRAS = "omni_wan.extras:WanExtras"
# cfg_parallel / sequence_parallel: omni_core.diffusion.distributed parallelizes the Wan transformer
# (BatchSplitParallel over the batched CFG rows; the Ulysses plan of omni_wan.denoiser).
_CAPS = PipelineCapabilities(step_batching=True, cfg_parallel=True, sequence_parallel=True)


@hookimpl
def omni_register_pipelines(register: Callable[[PipelineSpec], None]) -> None:
    register(
        PipelineSpec(
            name="wan-t2v",
            implementation=_IMPL,
            tasks=("t2v", "ti2v"),
            architectures=("WanPipeline",),
            extras=_EXTRAS,
            capabilities=_CAPS,
            description="Wan2.1 T2V (1.3B/14B), Wan2.2 T2V-A14B (two experts) and Wan2.2 "
            "TI2V-5B (text or text+image) on diffusers' WanTransformer3DModel.",
        )
    )
    register(
        PipelineSpec(
            name="wan-i2v",
            implementation=_IMPL,
            tasks=("i2v",),
            architectures=("WanImageToVideoPipeline",),
            extras=_EXTRAS,
            capabilities=_CAPS,
            description="Wan2.1 I2V (CLIP image encoder) and Wan2.2 I2V-A14B.",
        )
    )


@hookimpl
def omni_register_denoisers(register: Callable[[DenoiserSpec], None]) -> None:
    register(
        DenoiserSpec(
            name="wan-transformer-3d",
            architectures=("WanTransformer3DModel",),
            implementation="omni_wan.denoiser:wan_adapter",
            description="diffusers' WanTransformer3DModel: blocks, fused QKV, TeaCache "
            "polynomials per size, the Ulysses sequence plan.",
        )
    )


@hookimpl
def omni_register_benchmarks(register: Callable[[BenchmarkSpec], None]) -> None:
    for name, attr, tiny, description in (
        ("wan2.2-ti2v-5b-704x1280x121", "TI2V_5B_720P", False, "Wan2.2-TI2V-5B 704x1280x121"),
        ("wan2.1-t2v-14b-480x832x81", "T2V_14B_480P", False, "Wan2.1-T2V-14B 480x832x81"),
        ("tiny-wan", "TINY", True, "tiny Wan2.2-TI2V layout (CPU smoke test)"),
    ):
        register(
            BenchmarkSpec(
                name=name,
                pipeline="wan-t2v",
                tiny=tiny,
                implementation=f"omni_wan.bench:{attr}",
                description=description,
            )
        )
