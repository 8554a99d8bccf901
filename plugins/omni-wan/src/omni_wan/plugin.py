"""omni plugin entry point of omni-wan: registers the Wan pipelines (lazily, no torch import)."""

from __future__ import annotations

from collections.abc import Callable

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.registry import PipelineCapabilities, PipelineSpec

OMNI_PLUGIN_API = PLUGIN_API_VERSION

_IMPL = "omni_wan.pipeline:WanVideoPipeline"
_EXTRAS = "omni_wan.extras:WanExtras"
# cfg_parallel / sequence_parallel: omni_core.distributed parallelizes the Wan transformer
# (BatchSplitParallel over the batched CFG rows; the Ulysses plan for WanTransformer3DModel).
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
