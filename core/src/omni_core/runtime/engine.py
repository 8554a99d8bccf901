"""The serving engine: one worker thread per model, a bounded queue and step-level batching.
Long because the worker's loop, its admission and its completion share one thread's state and
read best top to bottom in one place.

Why a thread that owns the pipeline: a model's weights live on one device and its pipeline is not
re-entrant, so exactly one thread calls ``prepare`` / ``step`` / ``decode`` / ``stream``. Callers
(the HTTP server, benchmarks) submit :class:`Job` objects from any thread and get a
:class:`concurrent.futures.Future`; asyncio code wraps it with :func:`asyncio.wrap_future`.

The loop is continuous batching at denoising-step granularity: between two steps the worker admits
new requests (``prepare``), drops cancelled or timed-out ones, steps every group of states that
share :meth:`~omni_core.contract.pipeline.StagedPipeline.batch_key` (at most ``max_batch`` per
``step`` call), and decodes the states that finished. A seeded request steps alone unless
``batch_seeded``: a batched forward rounds differently from a forward of one (other kernels for
other shapes, on every device), so its pixels would depend on what ran beside it. Streamed
requests (speech, chat) advance one delta of
:meth:`~omni_core.contract.pipeline.StreamedPipeline.open_stream` per iteration, or, when the
pipeline has a :class:`~omni_core.contract.pipeline.SharedRuntime`, every open stream advances
in one shared step; so they interleave with each other and with diffusion work. Nothing in the
loop reads tensor values back to the host.

``admit_window_s``: an idle engine admits the first request at once and starts its first step
(a chat answer's prefill, tens of milliseconds on a large model), so a second request that
arrives a millisecond later waits behind that whole step and starts a step later. With a window,
the idle engine waits that long after the first arrival for others, and those admitted together
share their first step. A lone request pays the window; a busy engine never waits (new requests
join at the next step boundary anyway). Default 0: no wait.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import traceback
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from omni_core.contract.collect import Collector
from omni_core.contract.errors import (
    EngineStoppedError,
    InvalidRequestError,
    QueueFullError,
    RequestCancelledError,
    RequestTimeoutError,
)
from omni_core.contract.pipeline import (
    DenoiseState,
    Pipeline,
    PolledStream,
    StagedPipeline,
    StreamedPipeline,
    close_stream,
    step_key,
)
from omni_core.contract.types import GenerationRequest, GenerationResult
from omni_core.runtime.jobs import (
    EngineObserver,
    Job,
    NullObserver,
    describe_failure,
    failure_error,
)

log = logging.getLogger("omni.engine")


def _cancelled(job: Job) -> Exception:
    """The error a cancelled job ends with: the server's shutdown, or its client's cancel."""
    if job.stopped:
        return EngineStoppedError(job.cancel_reason)
    return RequestCancelledError(job.cancel_reason)


@dataclass(eq=False)
class _Running:
    job: Job
    state: DenoiseState | None = None
    stream: Iterator[Any] | None = None  # AudioChunk (speech) or ChatDelta (chat) objects
    collector: Collector | None = None
    #: Seconds in each stage so far (``prepare_s``, ``denoise_s``: the steps it was part of).
    timings: dict[str, float] = field(default_factory=dict)


class Engine:
    """Serve one pipeline from one worker thread; see the module docstring for the loop."""

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        name: str = "model",
        max_batch: int = 4,
        max_queue: int = 64,
        request_timeout_s: float | None = None,
        observer: EngineObserver | None = None,
        batch_seeded: bool = False,
        admit_window_s: float = 0.0,
    ) -> None:
        if max_batch < 1 or max_queue < 1:
            raise ValueError("max_batch and max_queue must be >= 1")
        if admit_window_s < 0:
            raise ValueError("admit_window_s must be >= 0")
        self.pipeline = pipeline
        self.name = name
        self.max_batch = max_batch
        self.capacity = pipeline.concurrency(max_batch)  # requests running at once
        self.max_queue = max_queue
        self.request_timeout_s = request_timeout_s
        #: Whether seeded staged requests may share a step (faster; see the module docstring).
        self.batch_seeded = batch_seeded
        #: Seconds an idle engine waits after a first arrival for others (module docstring).
        self.admit_window_s = admit_window_s
        self.observer: EngineObserver = observer or NullObserver()
        if not isinstance(pipeline, StagedPipeline | StreamedPipeline):
            raise TypeError(
                f"{type(pipeline).__name__} is neither a staged nor a streamed pipeline"
            )
        self._pending: collections.deque[Job] = collections.deque()
        self._running: list[_Running] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._drain = True
        self._thread: threading.Thread | None = None
        #: Mean seconds per finished request, for Retry-After estimates.
        self._mean_service_s = 1.0
        options = pipeline.options
        self._platform = options.platform if options is not None else None
        self._device = options.device if options is not None else None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Engine:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name=f"omni-engine-{self.name}", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, *, drain: bool = True, timeout: float | None = 30.0) -> list[Job]:
        """Stop taking work; finish running (and, with ``drain``, queued) jobs within ``timeout``.

        Without ``drain``, queued jobs fail at once with :class:`EngineStoppedError` (never
        started: the caller may persist them and run them after a restart) and are returned.
        Running jobs still unfinished at ``timeout`` are cancelled ("server shut down").
        """
        with self._cond:
            self._stopping = True
            self._drain = drain
            leftover = [] if drain else list(self._pending)
            if not drain:
                self._pending.clear()
            self._cond.notify_all()
        for job in leftover:
            self._finish_error(job, EngineStoppedError("the server shut down before this started"))
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                with self._cond:
                    unfinished = [r.job for r in self._running] + list(self._pending)
                for job in unfinished:
                    job.cancel("the server shut down before this request finished", stopped=True)
                thread.join(5.0)
        return leftover

    @property
    def queue_depth(self) -> int:
        return len(self._pending)

    @property
    def running_count(self) -> int:
        return len(self._running)

    # -- submission --------------------------------------------------------------------------

    def submit(self, job: Job) -> Job:
        """Queue ``job``; raises :class:`QueueFullError` (back-pressure) or EngineStoppedError."""
        if job.timeout_s is None:
            job.timeout_s = self.request_timeout_s
        with self._cond:
            if self._stopping:
                raise EngineStoppedError("the server is shutting down; retry on another instance")
            if len(self._pending) >= self.max_queue:
                waves = (len(self._pending) + len(self._running)) / max(self.capacity, 1)
                retry = max(1.0, round(waves * self._mean_service_s, 1))
                raise QueueFullError(
                    f"model {self.name!r} has {len(self._pending)} queued requests (limit "
                    f"{self.max_queue}); retry later",
                    retry_after=retry,
                )
            self._pending.append(job)
            self.observer.queue_depth(self.name, len(self._pending))
            self._cond.notify_all()
        log.info("request %s queued for %s", job.id, self.name)
        return job

    def cancel(self, job: Job, reason: str = "cancelled by the client") -> None:
        """Cancel a queued job at once, or a running one at the next step boundary."""
        job.cancel(reason)
        with self._cond:
            if job in self._pending:
                self._pending.remove(job)
                self.observer.queue_depth(self.name, len(self._pending))
                self._finish_error(job, RequestCancelledError(reason))
            self._cond.notify_all()

    def run(self, request: GenerationRequest, timeout: float | None = None) -> GenerationResult:
        """Submit and wait: the blocking convenience used by warm-up and tests."""
        return self.submit(Job(request)).future.result(timeout)

    # -- the worker ----------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._running and not self._stopping:
                    self._cond.wait(1.0)
                if self._stopping and not self._running and (not self._drain or not self._pending):
                    break
                idle = not self._running
                admitted: list[Job] = []
                self._take(admitted)
                if admitted and idle and self.admit_window_s > 0:
                    self._gather(admitted)
                if admitted:
                    self.observer.queue_depth(self.name, len(self._pending))
            for job in admitted:
                self._admit(job)
            self._drop_cancelled()
            self.observer.running(self.name, len(self._running))
            if self._running:
                try:
                    self._iterate()
                except Exception as exc:  # pragma: no cover - a bug in the loop itself
                    log.exception("engine %s: loop error", self.name)
                    for r in list(self._running):
                        self._fail(r, failure_error(exc))
        self.observer.running(self.name, 0)

    def _take(self, admitted: list[Job]) -> None:
        """Move queued jobs into ``admitted`` while there is room (the lock is held)."""
        while self._pending and len(self._running) + len(admitted) < self.capacity:
            admitted.append(self._pending.popleft())

    def _gather(self, admitted: list[Job]) -> None:
        """Wait up to ``admit_window_s`` for more arrivals to start with ``admitted`` (the
        lock is held; ``submit`` notifies)."""
        deadline = time.monotonic() + self.admit_window_s
        while not self._stopping and len(self._running) + len(admitted) < self.capacity:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._cond.wait(left)
            self._take(admitted)

    def _admit(self, job: Job) -> None:
        if job.future.done():
            return
        if job.cancelled:
            self._finish_error(job, _cancelled(job))
            return
        if job.expired(time.monotonic()):  # timed out while queued: no compute at all
            self._finish_error(
                job, RequestTimeoutError(f"request timed out after {job.timeout_s:g} s in queue")
            )
            return
        job.started_at = time.monotonic()
        job.future.set_running_or_notify_cancel()
        log.info("request %s started on %s", job.id, self.name)
        if job.on_start is not None:
            try:
                job.on_start()
            except Exception:
                log.exception("request %s: start callback failed", job.id)
        entry = _Running(job)
        if not self._running and self._platform is not None:
            self._reset_peak()  # the peak a result reports is that of the requests beside it
        t0 = time.perf_counter()
        try:
            if isinstance(self.pipeline, StreamedPipeline):  # a stream and what gathers it
                entry.stream = iter(self.pipeline.open_stream(job.request))
                entry.collector = self.pipeline.collector(job.started_at)
            else:
                assert isinstance(self.pipeline, StagedPipeline)
                entry.state = self.pipeline.prepare(job.request)
                entry.timings["prepare_s"] = time.perf_counter() - t0
        except InvalidRequestError as exc:
            self._finish_error(job, exc)
            return
        except Exception as exc:  # noqa: BLE001 - one request fails, the server keeps serving
            self._log_failure(job, exc)
            self._finish_error(job, failure_error(exc))
            return
        with self._cond:
            self._running.append(entry)
        if entry.state is not None and entry.state.done:
            self._decode(entry)

    def _drop_cancelled(self) -> None:
        now = time.monotonic()
        for entry in list(self._running):
            job = entry.job
            if job.cancelled:
                self._fail(entry, _cancelled(job))
            elif job.expired(now):
                self._fail(
                    entry, RequestTimeoutError(f"request timed out after {job.timeout_s:g} s")
                )

    def _iterate(self) -> None:
        staged = [r for r in self._running if r.state is not None]
        streams = [r for r in self._running if r.stream is not None]
        if staged:
            # Keys are recomputed every step: they may include the step index (pipelines whose
            # step() needs one shared timestep), so compatibility changes as requests advance.
            groups: dict[Hashable, list[_Running]] = collections.defaultdict(list)
            assert isinstance(self.pipeline, StagedPipeline)
            for entry in staged:  # the LoRA adapters and scales are part of the key
                assert entry.state is not None
                key = step_key(self.pipeline, entry.state)
                if not self.batch_seeded and entry.job.request.seed is not None:
                    key = (key, id(entry))  # the same numbers whatever runs beside it
                groups[key].append(entry)
            for group in groups.values():
                for start in range(0, len(group), self.max_batch):
                    self._step(group[start : start + self.max_batch])
            for entry in staged:
                if entry in self._running and entry.state is not None and entry.state.done:
                    self._decode(entry)
        if streams:
            assert isinstance(self.pipeline, StreamedPipeline)
            runtime = self.pipeline.shared_runtime()
            if runtime is not None:  # one shared step for every stream, then take what is ready
                runtime.allow_seeded_batches(self.batch_seeded)
                runtime.step()
            for entry in streams:
                self._next_chunk(entry, polled=runtime is not None)

    def _step(self, batch: list[_Running]) -> None:
        assert isinstance(self.pipeline, StagedPipeline)
        states = [e.state for e in batch if e.state is not None]
        t0 = time.perf_counter()
        try:
            self.pipeline.step(states)
        except Exception as exc:  # noqa: BLE001 - one request fails, the server keeps serving
            for entry in batch:
                self._log_failure(entry.job, exc)
                self._fail(entry, failure_error(exc, len(batch)))
            return
        elapsed = time.perf_counter() - t0
        self.observer.batch(self.name, len(states), elapsed)
        for entry in batch:
            entry.timings["denoise_s"] = entry.timings.get("denoise_s", 0.0) + elapsed
            state = entry.state
            if entry.job.on_progress is not None and state is not None:
                try:
                    entry.job.on_progress(state.step_index, state.num_steps)
                except Exception:  # a progress sink must never break the loop
                    log.exception("request %s: progress callback failed", entry.job.id)

    def _decode(self, entry: _Running) -> None:
        assert isinstance(self.pipeline, StagedPipeline) and entry.state is not None
        job = entry.job
        t0 = time.perf_counter()
        try:
            result = self.pipeline.decode(entry.state)
        except Exception as exc:  # noqa: BLE001 - one request fails, the server keeps serving
            self._log_failure(job, exc)
            self._fail(entry, failure_error(exc))
            return
        result.timings["decode_s"] = time.perf_counter() - t0
        result.timings["steps"] = float(entry.state.num_steps)
        self._succeed(entry, result)

    def _next_chunk(self, entry: _Running, *, polled: bool = False) -> None:
        """One chunk of the stream; ``polled``: the deltas its shared runtime made ready."""
        assert entry.stream is not None
        job = entry.job
        try:
            if polled:
                assert isinstance(entry.stream, PolledStream)
                chunks, stream = entry.stream.poll(), entry.stream
                if stream.error is not None:
                    raise stream.error
            else:  # a stream that advances alone
                chunks, stream = [next(entry.stream)], None
        except StopIteration:
            self._finish_stream(entry)
            return
        except InvalidRequestError as exc:
            self._fail(entry, exc)
            return
        except Exception as exc:  # noqa: BLE001 - one request fails, the server keeps serving
            self._log_failure(job, exc)
            self._fail(entry, failure_error(exc))
            return
        assert entry.collector is not None
        for chunk in chunks:
            entry.collector.add(chunk)
        try:
            for chunk in chunks if job.on_chunk is not None else ():
                job.on_chunk(chunk)
        except Exception:
            log.exception("request %s: chunk sink failed", job.id)
        if stream is not None and stream.finished:
            self._finish_stream(entry)

    def _finish_stream(self, entry: _Running) -> None:
        assert entry.collector is not None
        try:
            self._succeed(entry, entry.collector.result())
        except InvalidRequestError as exc:  # e.g. a speech stream that made no audio
            self._fail(entry, exc)

    # -- completion ----------------------------------------------------------------------------

    def _remove(self, entry: _Running) -> None:
        with self._cond:
            if entry in self._running:
                self._running.remove(entry)
            self.observer.running(self.name, len(self._running))  # never stuck at the last value
        if entry.stream is not None:
            try:
                close_stream(entry.stream)
            except Exception:  # pragma: no cover - a generator that fails to close
                log.exception("request %s: closing the stream failed", entry.job.id)
        entry.state = None  # free latents now, not when the client reads the result

    def _succeed(self, entry: _Running, result: GenerationResult) -> None:
        job = entry.job
        self._remove(entry)
        now = time.monotonic()
        for key, seconds in entry.timings.items():
            result.timings.setdefault(key, seconds)
        result.timings.setdefault("queue_s", (job.started_at or now) - job.submitted_at)
        result.timings["total_s"] = now - job.submitted_at
        service = now - (job.started_at or job.submitted_at)
        self._mean_service_s = 0.8 * self._mean_service_s + 0.2 * service
        if self._platform is not None:
            try:
                peak = self._platform.memory_stats(self._device).get("peak_allocated_bytes")
            except Exception:  # noqa: BLE001  # pragma: no cover - a platform without stats
                peak = None
            if peak is not None:
                result.peak_memory_bytes = peak
                self.observer.peak_memory(self.name, peak)
        log.info("request %s completed in %.3f s", job.id, result.timings["total_s"])
        if not job.future.done():
            job.future.set_result(result)

    def _reset_peak(self) -> None:
        try:
            assert self._platform is not None
            self._platform.reset_peak_memory(self._device)
        except Exception:  # noqa: BLE001  # pragma: no cover - a platform without stats
            log.debug("engine %s: the platform cannot reset its peak memory", self.name)

    def _fail(self, entry: _Running, exc: BaseException) -> None:
        self._remove(entry)
        self._finish_error(entry.job, exc)

    def _finish_error(self, job: Job, exc: BaseException) -> None:
        log.info("request %s ended: %s", job.id, exc)
        if not job.future.done():
            if not job.future.running():
                job.future.set_running_or_notify_cancel()
            job.future.set_exception(exc)

    def _log_failure(self, job: Job, exc: BaseException) -> None:
        log.error(
            "request %s failed on %s: %s\n%s",
            job.id,
            self.name,
            describe_failure(exc),
            "".join(traceback.format_exception(exc)),
        )
