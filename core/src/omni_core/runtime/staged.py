"""Run requests to completion without the engine: the loop every staged pipeline shares
(:func:`run_to_completion`) and one request of any pipeline (:func:`run_direct`).

The serving engine adds queueing and continuous batching on top; this module is what the
Python API and the CLI use directly.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Hashable

from omni_core.contract.errors import RequestCancelledError
from omni_core.contract.pipeline import (
    DenoiseState,
    Pipeline,
    StagedPipeline,
    StreamedPipeline,
    step_key,
)
from omni_core.contract.types import GenerationRequest, GenerationResult

#: progress(request_id, steps_done, steps_total)
ProgressFn = Callable[[str, int, int], None]


class Cancelled(RequestCancelledError):
    """Raised inside the loop when a request was cancelled between steps (the engine's
    :class:`~omni_core.contract.errors.RequestCancelledError`, so callers catch one error)."""


def group_by_key(pipeline: StagedPipeline, states: list[DenoiseState]) -> list[list[DenoiseState]]:
    """Split states into groups that can share one ``step()`` call (same LoRA, same key)."""
    groups: dict[Hashable, list[DenoiseState]] = defaultdict(list)
    for state in states:
        groups[step_key(pipeline, state)].append(state)
    return list(groups.values())


def run_to_completion(
    pipeline: StagedPipeline,
    requests: list[GenerationRequest],
    *,
    progress: ProgressFn | None = None,
    should_cancel: Callable[[str], bool] | None = None,
    max_batch: int = 8,
) -> list[GenerationResult]:
    """prepare -> step until done (batched by key) -> decode, with per-stage timings."""
    sync = _synchronizer(pipeline)
    t0 = time.perf_counter()
    states = [pipeline.prepare(r) for r in requests]
    sync()
    t_prepare = time.perf_counter() - t0

    t1 = time.perf_counter()
    active = list(states)
    while active:
        for group in group_by_key(pipeline, active):
            for start in range(0, len(group), max_batch):
                pipeline.step(group[start : start + max_batch])
        for state in active:
            if progress is not None:
                progress(state.request.request_id, state.step_index, state.num_steps)
            if should_cancel is not None and should_cancel(state.request.request_id):
                raise Cancelled(state.request.request_id)
        active = [s for s in active if not s.done]
    sync()
    t_denoise = time.perf_counter() - t1

    results = []
    for state in states:
        t2 = time.perf_counter()
        result = pipeline.decode(state)
        sync()
        result.timings.setdefault("prepare_s", t_prepare / len(states))
        result.timings.setdefault("denoise_s", t_denoise)
        result.timings["decode_s"] = time.perf_counter() - t2
        result.timings["steps"] = float(state.num_steps)
        results.append(result)
    return results


def _synchronizer(pipeline: StagedPipeline) -> Callable[[], None]:
    options = pipeline.options
    if options is None:
        return lambda: None
    return lambda: options.platform.synchronize(options.device)


def run_direct(pipeline: Pipeline, request: GenerationRequest) -> GenerationResult:
    """Run one request without the engine (what the server's overhead is measured against)."""
    if isinstance(pipeline, StreamedPipeline):
        return pipeline.collect(request)
    assert isinstance(pipeline, StagedPipeline)
    (result,) = run_to_completion(pipeline, [request])
    return result
