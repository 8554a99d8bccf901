"""Serve a staged pipeline from a worker group: what ``Omni(..., cfg_parallel_size=2)`` uses.

:func:`launch_pipeline` validates the layout against the machine, the checkpoint's head count
and the pipeline's declared capabilities, then spawns the workers. Each rank loads the
pipeline on its own device (``PipelineOptions.parallel`` set, ``current_parallel_state()``
available), rank 0 validates requests, and every rank runs ``run_to_completion`` in
lock-step; rank 0's :class:`GenerationResult` comes back.

A pipeline opts in by wrapping its denoiser(s) after loading::

    from omni_core.distributed.parallelize import parallelize_denoiser
    self.transformer = parallelize_denoiser(self.transformer, options.attention)

Pipelines that have not done so yet can still be served: ``auto_parallelize=True`` wraps the
usual attributes (``transformer``, ``transformer_2``, ``transformers``) after loading.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_core.config import (
    AttentionConfig,
    CacheConfig,
    ParallelConfig,
    QuantizationConfig,
)
from omni_core.distributed.launcher import ParallelLauncher, WorkerContext, WorkerProgram
from omni_core.distributed.layout import checkpoint_num_heads

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.pipelines.base import GenerationRequest, GenerationResult, StagedPipeline
    from omni_core.platforms import Platform
    from omni_core.registry import PipelineSpec

_DENOISER_ATTRS = ("transformer", "transformer_2")


def auto_parallelize(pipeline: Any, router: Any = None) -> int:
    """Wrap a loaded pipeline's denoiser attributes with :func:`parallelize_denoiser`.

    Returns how many denoisers were wrapped. Pipelines that wrap their own return 0 (their
    models carry the marker set by ``parallelize_denoiser``).
    """
    from omni_core.distributed.parallelize import parallelize_denoiser

    count = 0

    def wrap(model: Any) -> Any:
        nonlocal count
        if model is None or getattr(model, "_omni_parallel", False):
            return model
        wrapped = parallelize_denoiser(model, router)
        if wrapped is not None:
            model._omni_parallel = True
            count += 1
        return wrapped

    for attr in _DENOISER_ATTRS:
        if getattr(pipeline, attr, None) is not None:
            setattr(pipeline, attr, wrap(getattr(pipeline, attr)))
    models = getattr(pipeline, "transformers", None)
    if isinstance(models, list):
        models[:] = [wrap(m) for m in models]
    return count


class PipelineProgram(WorkerProgram):
    """Load ``spec`` from ``path`` on every rank; run requests to completion in lock-step."""

    def __init__(
        self,
        path: str | Path,
        spec_name: str,
        *,
        dtype: str | None = None,
        attention: AttentionConfig | None = None,
        cache: CacheConfig | None = None,
        quantization: QuantizationConfig | None = None,
        parallel: ParallelConfig | None = None,
        extra: dict[str, Any] | None = None,
        auto_parallelize: bool = True,
        max_batch: int = 8,
    ) -> None:
        self.path = Path(path)
        self.spec_name = spec_name
        self.dtype = dtype
        self.attention = attention or AttentionConfig()
        self.cache = cache or CacheConfig()
        self.quantization = quantization or QuantizationConfig()
        self.parallel = parallel or ParallelConfig()
        self.extra = dict(extra or {})
        self.auto_parallelize = auto_parallelize
        self.max_batch = max_batch

    def setup(self, ctx: WorkerContext) -> None:
        from omni_core.api import parse_dtype
        from omni_core.attention import AttentionRouter
        from omni_core.pipelines.base import PipelineOptions
        from omni_core.plugins import get_registry

        registry = get_registry()
        spec = registry.pipelines[self.spec_name]
        platform = ctx.platform
        default = "float32" if platform.device_type == "cpu" else "bfloat16"
        options = PipelineOptions(
            device=ctx.device,
            dtype=parse_dtype(self.dtype, default),
            platform=platform,
            attention=AttentionRouter.build(self.attention, registry, platform),
            attention_config=self.attention,
            cache=self.cache,
            quantization=self.quantization,
            parallel=self.parallel,
            extra=self.extra,
        )
        pipeline = spec.load().from_pretrained(self.path, options)
        pipeline.spec = spec
        if self.auto_parallelize:
            auto_parallelize(pipeline, options.attention)
        self.pipeline: StagedPipeline = pipeline

    def validate(self, payload: GenerationRequest) -> GenerationRequest:
        return self.pipeline.validate(payload)

    def run(self, payload: GenerationRequest) -> GenerationResult:
        from omni_core.pipelines.runtime import run_to_completion

        (result,) = run_to_completion(self.pipeline, [payload], max_batch=self.max_batch)
        result.info["parallel"] = self.describe()
        return result

    def describe(self) -> dict[str, Any]:
        """The layout and, per sequence-parallel denoiser, the last shard sizes (for info)."""
        from omni_core.distributed.groups import current_parallel_state

        state = current_parallel_state()
        info: dict[str, Any] = {
            "cfg_parallel_size": self.parallel.cfg_parallel_size,
            "ulysses_degree": self.parallel.ulysses_degree,
            "world_size": state.world_size if state is not None else 1,
        }
        shards = []
        for model in _denoisers(self.pipeline):
            sp = getattr(getattr(model, "model", model), "_omni_sequence_parallel", None)
            if sp is not None and sp.sizes is not None:
                shards.append(list(sp.sizes))
        if shards:
            info["sequence_shards"] = shards
        return info


def _denoisers(pipeline: Any) -> list[Any]:
    found = [getattr(pipeline, a, None) for a in _DENOISER_ATTRS]
    models = getattr(pipeline, "transformers", None)
    if isinstance(models, list):
        found += models
    return [m for m in found if m is not None]


def launch_pipeline(
    path: str | Path,
    spec: PipelineSpec,
    parallel: ParallelConfig,
    *,
    platform: Platform | None = None,
    device_count: int | None = None,
    start: bool = True,
    **program_options: Any,
) -> ParallelLauncher:
    """Validate the layout (before spawning), then start the worker group for ``spec``."""
    program = PipelineProgram(path, spec.name, parallel=parallel, **program_options)
    caps = spec.capabilities
    launcher = ParallelLauncher(
        program,
        parallel,
        platform=platform,
        device_count=device_count,
        num_heads=checkpoint_num_heads(path),
        supports_cfg_parallel=caps.cfg_parallel,
        supports_sequence_parallel=caps.sequence_parallel,
        model_name=spec.name,
    )
    return launcher.start() if start else launcher
