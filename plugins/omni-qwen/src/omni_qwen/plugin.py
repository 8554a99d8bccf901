"""omni plugin entry point of omni-qwen: registers the Qwen-Image, Qwen3-TTS, Qwen2.5-Omni
and Qwen3-Omni pipelines (lazily, no torch)."""

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

_MODULE = "omni_qwen.pipelines"
_EXTRAS = "omni_qwen.extras:QwenImageExtras"
#: CFG-parallel splits the batched [cond; uncond] forward over two ranks; Ulysses shards the
#: image tokens of QwenImageTransformer2DModel (the sequence plan of omni_qwen.denoiser).
_CAPS = PipelineCapabilities(step_batching=True, cfg_parallel=True, sequence_parallel=True)


@hookimpl
def omni_register_pipelines(register: Callable[[PipelineSpec], None]) -> None:
    register(
        PipelineSpec(
            name="qwen-image",
            implementation=f"{_MODULE}:QwenImagePipeline",
            tasks=("t2i",),
            architectures=("QwenImagePipeline",),
            extras=_EXTRAS,
            capabilities=_CAPS,
            description="Qwen-Image text-to-image (true CFG with a negative prompt), any size in "
            "multiples of 16 px.",
        )
    )
    register(
        PipelineSpec(
            name="qwen-image-edit",
            implementation=f"{_MODULE}:QwenImageEditPipeline",
            tasks=("i2i",),
            architectures=("QwenImageEditPipeline",),
            extras=_EXTRAS,
            capabilities=_CAPS,
            description="Qwen-Image-Edit: one input image plus an instruction.",
        )
    )
    register(
        PipelineSpec(
            name="qwen-image-edit-plus",
            implementation=f"{_MODULE}:QwenImageEditPlusPipeline",
            tasks=("i2i",),
            architectures=("QwenImageEditPlusPipeline",),
            extras=_EXTRAS,
            capabilities=_CAPS,
            description="Qwen-Image-Edit-2509: one to three input images plus an instruction.",
        )
    )

    register(
        PipelineSpec(
            name="qwen3-tts",
            implementation="omni_qwen.tts.pipeline:Qwen3TTSPipeline",
            tasks=("tts",),
            architectures=("Qwen3TTSForConditionalGeneration",),
            extras="omni_qwen.tts.pipeline:Qwen3TTSExtras",
            capabilities=PipelineCapabilities(streaming=True, step_batching=True),
            description="Qwen3-TTS 12 Hz (0.6B/1.7B; CustomVoice speakers + instructions, "
            "VoiceDesign, Base voice cloning) on the autoregressive runtime: concurrent "
            "requests share decode steps, audio streams as codes arrive.",
        )
    )
    register(
        PipelineSpec(
            name="qwen2.5-omni",
            implementation="omni_qwen.omni.qwen25_pipeline:Qwen25OmniPipeline",
            tasks=("chat",),
            architectures=("Qwen2_5OmniForConditionalGeneration",),
            capabilities=PipelineCapabilities(streaming=True, step_batching=True),
            description="Qwen2.5-Omni (3B/7B): text, image, audio and video in, text and speech "
            "out; thinker and talker on the chat runtime (concurrent answers share decode "
            "steps), token2wav on the whole answer or streamed chunks.",
        )
    )
    register(
        PipelineSpec(
            name="qwen3-omni",
            implementation="omni_qwen.omni.qwen3_pipeline:Qwen3OmniPipeline",
            tasks=("chat",),
            architectures=("Qwen3OmniMoeForConditionalGeneration",),
            capabilities=PipelineCapabilities(streaming=True, step_batching=True),
            description="Qwen3-Omni (30B-A3B MoE): text, image, audio and video in, text and "
            "speech out; thinker, talker and code predictor on the chat runtime (concurrent "
            "answers share decode steps), code2wav streamed in chunks with left context.",
        )
    )


@hookimpl
def omni_register_denoisers(register: Callable[[DenoiserSpec], None]) -> None:
    register(
        DenoiserSpec(
            name="qwen-image-transformer",
            architectures=("QwenImageTransformer2DModel",),
            implementation="omni_qwen.denoiser:qwen_image_adapter",
            description="diffusers' QwenImageTransformer2DModel: blocks, TeaCache indicator and "
            "polynomial, the Ulysses sequence plan (text tokens replicated).",
        )
    )


@hookimpl
def omni_register_benchmarks(register: Callable[[BenchmarkSpec], None]) -> None:
    for name, attr, tiny, description in (
        ("qwen-image-1024", "QWEN_IMAGE_1024", False, "Qwen-Image 1024x1024, true CFG 4"),
        ("tiny-qwen", "TINY", True, "tiny Qwen-Image layout (CPU smoke test)"),
    ):
        register(
            BenchmarkSpec(
                name=name,
                pipeline="qwen-image",
                tiny=tiny,
                implementation=f"omni_qwen.bench:{attr}",
                description=description,
            )
        )
