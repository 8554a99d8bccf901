"""The serving engine: one worker thread per model, a bounded queue and step-level batching.

Why a thread that owns the pipeline: a model's weights live on one device and its pipeline is not
re-entrant, so exactly one thread calls ``prepare`` / ``step`` / ``decode`` / ``stream``. Callers
(the HTTP server, benchmarks) submit :class:`Job` objects from any thread and get a
:class:`concurrent.futures.Future`; asyncio code wraps it with :func:`asyncio.wrap_future`.

The loop is continuous batching at denoising-step granularity: between two steps the worker admits
new requests (``prepare``), drops cancelled or timed-out ones, steps every group of states that
share :meth:`~omni_core.pipelines.base.StagedPipeline.batch_key` (at most ``max_batch`` per
``step`` call), and decodes the states that finished. Speech requests advance one chunk of
:meth:`~omni_core.pipelines.base.SpeechPipeline.stream` per iteration, so they interleave with each
other and with diffusion work. Nothing in the loop reads tensor values back to the host.
"""

from __future__ import annotations

from omni_core.engine.job import (
    ChunkSink,
    EngineError,
    EngineObserver,
    EngineStoppedError,
    Job,
    ProgressFn,
    QueueFullError,
    RequestCancelledError,
    RequestFailedError,
    RequestOutOfMemoryError,
    RequestTimeoutError,
    describe_failure,
    failure_error,
)
from omni_core.engine.worker import Engine
from omni_core.pipelines.base import (
    GenerationRequest,
    GenerationResult,
    Pipeline,
    SpeechPipeline,
    StagedPipeline,
)


def run_direct(pipeline: Pipeline, request: GenerationRequest) -> GenerationResult:
    """Run one request without the engine (what the server's overhead is measured against)."""
    from omni_core.pipelines.runtime import run_to_completion

    if isinstance(pipeline, SpeechPipeline):
        from omni_core.api import _collect_speech

        return _collect_speech(pipeline, request)
    assert isinstance(pipeline, StagedPipeline)
    (result,) = run_to_completion(pipeline, [request])
    return result


__all__ = [
    "ChunkSink",
    "Engine",
    "EngineError",
    "EngineObserver",
    "EngineStoppedError",
    "Job",
    "ProgressFn",
    "QueueFullError",
    "RequestCancelledError",
    "RequestFailedError",
    "RequestOutOfMemoryError",
    "RequestTimeoutError",
    "describe_failure",
    "failure_error",
    "run_direct",
]
