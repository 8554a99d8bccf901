"""The video-job state machine: queued -> in_progress -> completed | failed | cancelled.

A job is persisted (:class:`~omni_core.serving.persistence.JobStore`) before it reaches the
engine, so a restart loses nothing: finished jobs stay listed, a job that was running is queued
again from its first step (up to a retry limit), and queued ones run again once their model is
ready (:meth:`VideoJobs.resume`).
Progress and MP4 encoding happen on an I/O pool, never on the engine's worker thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from omni_core.engine import EngineStoppedError, Job, RequestCancelledError
from omni_core.pipelines.base import GenerationRequest, GenerationResult
from omni_core.serving import media
from omni_core.serving.errors import from_exception
from omni_core.serving.metrics import Metrics
from omni_core.serving.models import ServedModel
from omni_core.serving.persistence import JobRecord, JobStore

log = logging.getLogger("omni.serving")

#: Hands a job to its model's engine (raises the APIError of a refusal: 429, 503).
Submit = Callable[[ServedModel, Job], Job]
#: Rebuilds the request of a persisted job (after a restart).
Rebuild = Callable[[ServedModel, JobRecord], GenerationRequest]


class VideoJobs:
    """The server's video jobs: the ones in flight in this process, and their records."""

    def __init__(
        self,
        store: JobStore,
        *,
        submit: Submit,
        metrics: Metrics,
        io: ThreadPoolExecutor,
        stopping: Callable[[], bool],
    ) -> None:
        self.store = store
        self._submit = submit
        self.metrics = metrics
        self.io = io
        self._stopping = stopping
        self.running: dict[str, Job] = {}

    def get(self, job_id: str) -> Job | None:
        return self.running.get(job_id)

    # -- submit -----------------------------------------------------------------------------

    def submit(self, served: ServedModel, request: GenerationRequest) -> Job:
        """Run a persisted job (its record exists): progress and the outcome go to the store."""
        store = self.store
        job_id = request.request_id
        last = [-1]

        def on_start() -> None:
            self.io.submit(store.update, job_id, only_active=True, status="in_progress")

        def on_progress(done: int, total: int) -> None:
            pct = min(99, int(100 * done / max(total, 1)))
            if pct != last[0]:
                last[0] = pct
                self.io.submit(store.update, job_id, only_active=True, progress=pct)

        job = Job(request, on_progress=on_progress, on_start=on_start)
        job.future.add_done_callback(lambda fut: self._done(job, fut))
        self.running[job_id] = job
        try:
            return self._submit(served, job)
        except Exception:
            self.running.pop(job_id, None)
            raise

    def resume(self, models: Mapping[str, ServedModel], rebuild: Rebuild) -> None:
        """Queued jobs of a previous run start again once their model is ready."""
        for record in self.store.list(status="queued", order="asc", limit=10_000):
            if self._stopping():  # SIGTERM while models loaded: the rest stay queued
                return
            if record.id in self.running:
                continue
            served = models.get(record.model)
            if served is None or served.status != "ready":
                self.fail(
                    record.id,
                    "model_unavailable",
                    f"model {record.model!r} is not served by this server any more",
                )
                continue
            try:
                self.submit(served, rebuild(served, record))
            except Exception as exc:  # noqa: BLE001 - a stale job must not block the others
                if self._stopping():  # refused because the server is stopping: stays queued
                    return
                api = from_exception(exc)
                self.fail(record.id, api.code or "invalid_request", api.message)

    # -- outcomes -----------------------------------------------------------------------------

    def _done(self, job: Job, fut: Future[GenerationResult]) -> None:
        job_id = job.id
        exc = fut.exception()
        if exc is None:
            try:
                self.io.submit(self._write, job_id, fut.result())
            except RuntimeError:  # the pool is shutting down: write it here
                self._write(job_id, fut.result())
            return
        self.running.pop(job_id, None)
        if isinstance(exc, EngineStoppedError) and job.started_at is None:
            return  # never started: stays queued on disk and runs after a restart
        if isinstance(exc, RequestCancelledError):
            if self._stopping():  # cut off by the end of the grace period: left in_progress,
                return  # so the next start queues it again (JobStore.recover)
            self.finalize(job_id, "cancelled", error={"code": "cancelled", "message": str(exc)})
            return
        api = from_exception(exc)
        self.fail(job_id, api.code or "generation_failed", api.message)

    def _write(self, job_id: str, result: GenerationResult) -> None:
        try:
            frames, fps = media.frames_of(result)
            path: Path = self.store.videos / f"{job_id}.mp4"
            media.encode_mp4(frames, fps, path)
        except Exception as exc:
            log.exception("video job %s: encoding failed", job_id)
            self.fail(job_id, "encoding_failed", f"encoding the video failed: {exc}")
        else:
            self.finalize(job_id, "completed", output_path=str(path), progress=100)
        finally:
            self.running.pop(job_id, None)

    def fail(self, job_id: str, code: str, message: str) -> None:
        self.finalize(job_id, "failed", error={"code": code, "message": message})

    def finalize(self, job_id: str, status: str, **fields: Any) -> None:
        """Record a terminal status (a job deleted meanwhile is left alone)."""
        record = self.store.get(job_id)
        if record is None:
            return
        self.store.update(job_id, status=status, completed_at=int(time.time()), **fields)
        self.metrics.jobs.labels(record.model, status).inc()
        log.info("video job %s %s", job_id, status)
