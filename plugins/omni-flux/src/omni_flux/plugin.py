"""omni plugin entry point of omni-flux: registers the FLUX pipelines, what acceleration and
parallelism need to know about their transformers, and their benchmark workloads (lazily: no
torch is imported here)."""

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

_MODULE = "omni_flux.pipelines"
#: CFG-parallel splits the batched [cond; uncond] true-CFG forward over two ranks; Ulysses shards
#: the image tokens of FluxTransformer2DModel (the sequence plan of omni_flux.denoiser).
_CAPS = PipelineCapabilities(step_batching=True, cfg_parallel=True, sequence_parallel=True)


@hookimpl
def omni_register_pipelines(register: Callable[[PipelineSpec], None]) -> None:
    register(
        PipelineSpec(
            name="flux",
            implementation=f"{_MODULE}:FluxImagePipeline",
            tasks=("t2i",),
            architectures=("FluxPipeline",),
            extras="omni_flux.extras:FluxExtras",
            capabilities=_CAPS,
            description="FLUX.1-dev (embedded guidance) and FLUX.1-schnell text-to-image, true "
            "CFG with a negative prompt, any size in multiples of 16 px.",
        )
    )
    register(
        PipelineSpec(
            name="flux-kontext",
            implementation=f"{_MODULE}:FluxKontextPipeline",
            tasks=("i2i",),
            architectures=("FluxKontextPipeline",),
            extras="omni_flux.extras:KontextExtras",
            capabilities=_CAPS,
            description="FLUX.1-Kontext-dev: one input image plus an instruction.",
        )
    )
    register(
        PipelineSpec(
            name="flux2",
            implementation=f"{_MODULE}:Flux2ImagePipeline",
            tasks=("t2i",),
            architectures=("Flux2Pipeline",),
            extras="omni_flux.extras:Flux2Extras",
            # no CFG to split: Ulysses only
            capabilities=PipelineCapabilities(step_batching=True, sequence_parallel=True),
            description="FLUX.2-dev text-to-image (Mistral 3 text encoder, embedded guidance).",
        )
    )
    register(
        PipelineSpec(
            name="flux2-klein",
            implementation=f"{_MODULE}:Flux2KleinImagePipeline",
            tasks=("t2i",),
            architectures=("Flux2KleinPipeline",),
            extras="omni_flux.extras:Flux2Extras",
            capabilities=_CAPS,
            description="FLUX.2-klein text-to-image (Qwen3 text encoder; real CFG on base "
            "checkpoints, none on step-distilled ones).",
        )
    )


@hookimpl
def omni_register_denoisers(register: Callable[[DenoiserSpec], None]) -> None:
    register(
        DenoiserSpec(
            name="flux-transformer",
            architectures=("FluxTransformer2DModel",),
            implementation="omni_flux.denoiser:flux_adapter",
            description="diffusers' FluxTransformer2DModel: double- and single-stream blocks, "
            "fused QKV, TeaCache4FLUX and MagCache ratios, the Ulysses sequence plan.",
        )
    )
    register(
        DenoiserSpec(
            name="flux2-transformer",
            architectures=("Flux2Transformer2DModel",),
            implementation="omni_flux.denoiser:flux2_adapter",
            description="diffusers' Flux2Transformer2DModel: double- and single-stream blocks "
            "(the single ones on the joint text + image sequence), the Ulysses sequence plan.",
        )
    )


@hookimpl
def omni_register_benchmarks(register: Callable[[BenchmarkSpec], None]) -> None:
    for name, attr, tiny, description in (
        ("flux1-dev-1024", "FLUX1_DEV_1024", False, "FLUX.1-dev 1024x1024, 28 steps"),
        ("tiny-flux", "TINY", True, "tiny FLUX.1-dev layout (CPU smoke test)"),
    ):
        register(
            BenchmarkSpec(
                name=name,
                pipeline="flux",
                tiny=tiny,
                implementation=f"omni_flux.bench:{attr}",
                description=description,
            )
        )
