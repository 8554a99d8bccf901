"""Serve a staged pipeline from a worker group: what ``Omni(..., cfg_parallel_size=2)`` uses.

:func:`launch_pipeline` validates the layout against the machine, the checkpoint's head count
and the pipeline's declared capabilities, then spawns the workers. Each rank loads the
pipeline on its own device (``PipelineOptions.parallel`` set, ``current_parallel_state()``
available) and rank 0 validates requests. :class:`ParallelPipeline` is the serving side: a
:class:`StagedPipeline` whose prepare / step / decode run on every rank in lock-step, so the
API and the serving engine use it like any local pipeline; rank 0's results come back.

A pipeline opts in by wrapping its denoiser(s) in ``from_pretrained`` (a no-op outside a worker
group) and reporting them from :meth:`~omni_core.contract.pipeline.Pipeline.denoisers`::

    from omni_core.diffusion import parallelize_denoiser
    self.transformer = parallelize_denoiser(self.transformer, options.attention)

The core never looks for denoisers on the pipeline object by attribute name.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_core.contract.config import (
    AttentionConfig,
    CacheConfig,
    ParallelConfig,
    QuantizationConfig,
)
from omni_core.contract.pipeline import StagedPipeline
from omni_core.diffusion.distributed.launcher import ParallelLauncher
from omni_core.diffusion.distributed.layout import checkpoint_num_heads
from omni_core.diffusion.distributed.worker import WorkerContext, WorkerProgram

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.pipeline import DenoiseState
    from omni_core.contract.platforms import Platform
    from omni_core.contract.registry import PipelineSpec
    from omni_core.contract.types import GenerationRequest, GenerationResult


class PipelineProgram(WorkerProgram):
    """Load ``spec`` from ``path`` on every rank and run the staged protocol in lock-step.

    Payloads are commands: ``("generate", request)`` runs a request to completion;
    ``("prepare", sid, request, drops)``, ``("step", sids, drops)`` and ``("decode", sid, drops)``
    mirror :class:`StagedPipeline` so the serving engine keeps step-level batching (see
    :class:`ParallelPipeline`). Every rank keeps its own copy of each state; ``drops`` lists
    states the serving side forgot (cancelled requests) so the workers free them too.
    """

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
        self.max_batch = max_batch

    def setup(self, ctx: WorkerContext) -> None:
        from omni_core.contract.attention import AttentionRouter
        from omni_core.contract.dtypes import parse_dtype
        from omni_core.contract.host import get_registry
        from omni_core.contract.pipeline import PipelineOptions

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
            spec=spec,
            registry=registry,
        )
        pipeline = spec.load().from_pretrained(self.path, options)
        pipeline.spec = spec
        self.pipeline: StagedPipeline = pipeline
        self.platform = platform
        self.device = ctx.device
        self.states: dict[int, DenoiseState] = {}

    def validate(self, payload: Any) -> Any:
        if payload[0] in ("generate", "prepare"):
            payload = (*payload[:-2], self.pipeline.validate(payload[-2]), payload[-1])
        return payload

    def answer(self, payload: Any) -> Any:
        if payload[0] == "validate":
            return self.pipeline.validate(payload[1])
        if payload[0] == "output_fps":
            return self.pipeline.output_fps(payload[1])
        if payload[0] == "describe":
            return self.describe()
        raise ValueError(f"unknown question {payload[0]!r}")

    def run(self, payload: Any) -> Any:
        from omni_core.runtime.staged import run_to_completion

        command, *args, drops = payload
        for sid in drops:
            self.states.pop(sid, None)
        if command == "generate":
            (result,) = run_to_completion(self.pipeline, [args[0]], max_batch=self.max_batch)
            result.info["parallel"] = self.describe()
            return result
        if command == "prepare":
            sid, request = args
            self.platform.reset_peak_memory(self.device)
            state = self.pipeline.prepare(request)
            self.states[sid] = state
            return state.num_steps, self.pipeline.batch_key(state)
        if command == "step":
            states = [self.states[sid] for sid in args[0]]
            self.pipeline.step(states)
            # Finished states have no next step to batch (pipelines may not key them).
            return [None if s.done else self.pipeline.batch_key(s) for s in states]
        if command == "decode":
            state = self.states.pop(args[0])
            result = self.pipeline.decode(state)
            result.info["parallel"] = self.describe()
            peak = self.platform.memory_stats(self.device).get("peak_allocated_bytes")
            if peak is not None:
                result.peak_memory_bytes = peak
            return result
        raise ValueError(f"unknown command {command!r}")

    def describe(self) -> dict[str, Any]:
        """The layout and, per sequence-parallel denoiser, the last shard sizes (for info)."""
        from omni_core.diffusion.distributed.groups import current_parallel_state
        from omni_core.diffusion.distributed.parallelize import sequence_parallel_of

        state = current_parallel_state()
        info: dict[str, Any] = {
            "cfg_parallel_size": self.parallel.cfg_parallel_size,
            "ulysses_degree": self.parallel.ulysses_degree,
            "world_size": state.world_size if state is not None else 1,
        }
        shards = []
        for model in self.pipeline.denoisers().values():
            sp = sequence_parallel_of(model)
            if sp is not None and sp.sizes is not None:
                shards.append(list(sp.sizes))
        if shards:
            info["sequence_shards"] = shards
        return info


class ParallelPipeline(StagedPipeline):
    """A :class:`StagedPipeline` whose stages run in a worker group: a drop-in for the engine.

    ``Omni`` and the serving engine drive it exactly like a local pipeline (prepare / step / decode,
    step-level batching by :meth:`batch_key`, progress and cancellation between steps); each call is
    one round trip to rank 0, which broadcasts it to every rank. States live in the workers; the
    local :class:`~omni_core.contract.pipeline.DenoiseState` is a handle (``data["sid"]``).
    ``healthy`` and ``health_reason`` tell ``/health`` whether the group still serves.
    """

    def __init__(self, launcher: ParallelLauncher, spec: PipelineSpec | None = None) -> None:
        import itertools
        import threading

        self.launcher = launcher
        self.spec = spec
        self._ids = itertools.count()
        self._drops: list[int] = []
        self._lock = threading.Lock()

    @classmethod
    def from_pretrained(cls, path: Path, options: Any) -> ParallelPipeline:
        raise TypeError("use ParallelPipeline.launch(path, spec, parallel, ...)")

    @classmethod
    def launch(
        cls,
        path: str | Path,
        spec: PipelineSpec,
        parallel: ParallelConfig,
        **launch_options: Any,
    ) -> ParallelPipeline:
        """Validate the layout, spawn the workers, load the pipeline on every rank."""
        return cls(launch_pipeline(path, spec, parallel, **launch_options), spec)

    # -- health and lifecycle -------------------------------------------------------------------
    @property
    def healthy(self) -> bool:
        return self.launcher.healthy

    @property
    def health_reason(self) -> str | None:
        return self.launcher.health_reason

    def close(self) -> None:
        self.launcher.close()

    # -- the staged protocol ----------------------------------------------------------------
    def validate(self, request: GenerationRequest) -> GenerationRequest:
        return self.launcher.run(("validate", request), kind="ask")

    def output_fps(self, request: GenerationRequest) -> int | None:
        """The loaded pipeline's answer (rank 0), so ``seconds`` maps to the real frame rate."""
        return self.launcher.run(("output_fps", request), kind="ask")

    def prepare(self, request: GenerationRequest) -> DenoiseState:
        import weakref

        from omni_core.contract.pipeline import DenoiseState

        sid = next(self._ids)
        num_steps, key = self.launcher.run(("prepare", sid, request, self._take_drops()))
        state = DenoiseState(request=request, num_steps=num_steps, data={"sid": sid, "key": key})
        weakref.finalize(state, self._forget, sid)
        return state

    def step(self, states: list[DenoiseState]) -> None:
        sids = [s.data["sid"] for s in states]
        keys = self.launcher.run(("step", sids, self._take_drops()))
        for state, key in zip(states, keys, strict=True):
            state.step_index += 1
            state.data["key"] = key

    def decode(self, state: DenoiseState) -> GenerationResult:
        return self.launcher.run(("decode", state.data["sid"], self._take_drops()))

    def batch_key(self, state: DenoiseState) -> Any:
        return state.data["key"]

    def generate(self, request: GenerationRequest) -> GenerationResult:
        """One request start to finish in a single round trip (no step-level batching)."""
        return self.launcher.run(("generate", request, self._take_drops()))

    def _forget(self, sid: int) -> None:
        with self._lock:
            self._drops.append(sid)

    def _take_drops(self) -> list[int]:
        with self._lock:
            drops, self._drops = self._drops, []
        return drops


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
    cache = program_options.get("cache")
    if parallel.ulysses_degree > 1 and cache is not None and cache.backend:
        from omni_core.contract.errors import ConfigError

        # A step cache decides per rank whether to skip blocks; under Ulysses the ranks would
        # disagree on their own token shards and one would wait in an all-to-all forever.
        raise ConfigError(
            f"cache.backend: {cache.backend!r} cannot be combined with ulysses_degree="
            f"{parallel.ulysses_degree} (cache decisions are not synchronised across the "
            "sequence shards); use cfg_parallel_size=2 with a cache, or no cache"
        )
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
