"""What the engine is handed and how it answers: :class:`Job` (a request, its callbacks and
its future), how a pipeline's failure becomes the error a job ends with (:func:`failure_error`;
the errors themselves are in :mod:`omni_core.contract.errors`), and the observer the engine
reports to."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol

from omni_core.contract.errors import (
    RequestFailedError,
    RequestOutOfMemoryError,
)
from omni_core.contract.types import AudioChunk, GenerationRequest, GenerationResult


def failure_error(exc: BaseException, batch: int = 1) -> RequestFailedError:
    """The error a request fails with when its pipeline raised ``exc`` (out of memory apart)."""
    message = describe_failure(exc, batch)
    if _out_of_memory(exc):
        return RequestOutOfMemoryError(message)
    return RequestFailedError(message)


def _out_of_memory(exc: BaseException) -> bool:
    text = str(exc).lower()
    return (
        isinstance(exc, MemoryError)
        or "OutOfMemory" in type(exc).__name__
        or ("out of memory" in text)
    )


class EngineObserver(Protocol):
    """Where the engine reports what it does (the server's Prometheus metrics)."""

    def queue_depth(self, model: str, depth: int) -> None: ...
    def running(self, model: str, count: int) -> None: ...
    def batch(self, model: str, size: int, seconds: float) -> None: ...
    def peak_memory(self, model: str, nbytes: int) -> None: ...


class NullObserver:
    """Reports nowhere (an engine without a server)."""

    def queue_depth(self, model: str, depth: int) -> None:
        pass

    def running(self, model: str, count: int) -> None:
        pass

    def batch(self, model: str, size: int, seconds: float) -> None:
        pass

    def peak_memory(self, model: str, nbytes: int) -> None:
        pass


#: progress(steps_done, steps_total)
ProgressFn = Callable[[int, int], None]
#: Receives each speech chunk as it is generated (from the worker thread).
ChunkSink = Callable[[AudioChunk], None]


@dataclass(eq=False)
class Job:
    """One request handed to the engine, and the handle to follow or cancel it."""

    request: GenerationRequest
    on_progress: ProgressFn | None = None
    on_chunk: ChunkSink | None = None
    #: Called from the worker when the job leaves the queue and starts.
    on_start: Callable[[], None] | None = None
    timeout_s: float | None = None
    future: Future[GenerationResult] = field(default_factory=Future)
    submitted_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None
    _cancel: threading.Event = field(default_factory=threading.Event)
    cancel_reason: str = "cancelled by the client"
    #: Cancelled because the engine stopped (it ends with EngineStoppedError: retry elsewhere).
    stopped: bool = False

    @property
    def id(self) -> str:
        return self.request.request_id

    def cancel(self, reason: str = "cancelled by the client", *, stopped: bool = False) -> None:
        """Ask the worker to drop this job; it stops within one denoising step (or chunk).
        ``stopped``: the engine is shutting down (the job fails with EngineStoppedError, which
        a client may retry, not with RequestCancelledError)."""
        self.cancel_reason = reason
        self.stopped = self.stopped or stopped
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def expired(self, now: float) -> bool:
        return self.timeout_s is not None and now - self.submitted_at > self.timeout_s


def describe_failure(exc: BaseException, batch: int = 1) -> str:
    """A one-line, user-facing reason for an exception raised by a pipeline."""
    name = type(exc).__name__
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else name
    if _out_of_memory(exc):
        where = f" (in a batch of {batch})" if batch > 1 else ""
        return (
            f"out of memory while generating{where}: {text[:300]}; retry with a smaller "
            "size, fewer frames or fewer concurrent requests"
        )
    return f"{name}: {text[:500]}"
