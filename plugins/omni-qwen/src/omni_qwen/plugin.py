"""omni plugin entry point of omni-qwen: registers the Qwen-Image pipelines (lazily, no torch)."""

from __future__ import annotations

from collections.abc import Callable

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.registry import PipelineCapabilities, PipelineSpec

OMNI_PLUGIN_API = PLUGIN_API_VERSION

_MODULE = "omni_qwen.pipelines"
_EXTRAS = "omni_qwen.extras:QwenImageExtras"
#: CFG-parallel splits the batched [cond; uncond] forward over two ranks; Ulysses shards the
#: image tokens of QwenImageTransformer2DModel (omni_core.distributed's sequence plan).
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
