"""The video-job state machine: queued -> in_progress -> completed | failed | cancelled.

A job is persisted in the job store (:mod:`omni_core.serving.stores`) before it reaches an
engine, so nothing accepted is lost. The server that accepts a job runs it when its engine has
room (up to ``max_batch`` video jobs of that model); otherwise the job waits in the store, and
whichever server sharing the store has room first claims it. A server owns the jobs its engine
holds and renews their lease; when a server dies (its lease expires, or it was a process of
this host that is gone), its running jobs are queued again from their first step, up to a
retry limit, and its queued ones go back to the store. A graceful stop hands its jobs back at
once. Progress and MP4 encoding happen on an I/O pool, never on the engine's worker thread; a
background thread renews leases, claims jobs and runs the retention sweeper.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from omni_core.contract.errors import EngineStoppedError, QueueFullError, RequestCancelledError
from omni_core.contract.types import GenerationRequest, GenerationResult
from omni_core.runtime.jobs import Job
from omni_core.serving import media, stage_metrics
from omni_core.serving.errors import APIError, from_exception
from omni_core.serving.metrics import Metrics
from omni_core.serving.models import ServedModel
from omni_core.serving.stores import JobRecord, JobStore, OutputStore, StorageConfig
from omni_core.serving.stores.retention import Sweeper

log = logging.getLogger("omni.serving")

#: Hands a job to its model's engine (raises the APIError of a refusal: 429, 503).
Submit = Callable[[ServedModel, Job], Job]
#: Rebuilds the request of a persisted job (after a restart, or on another server).
Rebuild = Callable[[ServedModel, JobRecord], GenerationRequest]

#: Seconds between two looks at the store for jobs to claim (a local submit wakes it at once).
POLL_S = 1.0


def new_owner() -> str:
    """This process's name in the store: ``host:pid:token`` (the token tells a restarted
    container's pid 1 from its previous life)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def dead_here(owner: str, me: str) -> bool:
    """True when ``owner`` was a process of this host that is gone."""
    host, _, rest = owner.partition(":")
    pid_text, _, _ = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit() or owner == me:
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return True  # an earlier process that had our pid (a restarted container)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class VideoJobs:
    """The server's video jobs: the ones its engines hold, and their records in the store."""

    def __init__(
        self,
        store: JobStore,
        outputs: OutputStore,
        *,
        submit: Submit,
        rebuild: Rebuild,
        metrics: Metrics,
        io: ThreadPoolExecutor,
        stopping: Callable[[], bool],
        storage: StorageConfig,
        capacity: int,
        max_queue: int,
    ) -> None:
        self.store = store
        self.outputs = outputs
        self._submit = submit
        self._rebuild = rebuild
        self.metrics = metrics
        self.io = io
        self._stopping = stopping
        self.lease_s = storage.lease_s
        self.capacity = capacity
        self.max_queue = max_queue
        self.owner = new_owner()
        self.sweeper = Sweeper(store, outputs, storage.retention)
        self.running: dict[str, Job] = {}
        self._model_of: dict[str, str] = {}
        self._models: Mapping[str, ServedModel] = {}
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._claim_lock = threading.Lock()

    def get(self, job_id: str) -> Job | None:
        return self.running.get(job_id)

    def room(self, model: str) -> int:
        """Video jobs of ``model`` this server's engine can take now."""
        return self.capacity - sum(1 for m in self._model_of.values() if m == model)

    # -- lifecycle ------------------------------------------------------------------------------

    def recover(self) -> tuple[list[JobRecord], list[JobRecord]]:
        """Jobs of dead servers back to the store (re-queued, or failed past the retry limit)."""
        dead = [o for o in self.store.owners() if dead_here(o, self.owner)]
        return self.store.recover(dead=dead)

    def start(self, models: Mapping[str, ServedModel]) -> None:
        """Claim and run jobs from the store (``models`` are the loaded ones)."""
        self._models = models
        self._thread = threading.Thread(target=self._loop, name="omni-jobs", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """After the engines stopped: hand every job still held back to the store, at once (a
        cut-off running job is queued again from its first step, as after a crash)."""
        self._closed.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)
        try:
            requeued, _ = self.store.recover(dead=[self.owner])
        except OSError:
            log.exception("could not hand the video jobs back to the store")
            return
        for record in requeued:
            log.warning("video job %s was cut off by the shutdown: queued again", record.id)

    def _loop(self) -> None:
        next_renew = next_recover = 0.0
        while not self._closed.is_set():
            now = time.monotonic()
            try:
                if now >= next_renew:
                    next_renew = now + self.lease_s / 3
                    self._renew()
                if now >= next_recover:
                    next_recover = now + min(5.0, self.lease_s / 3)
                    self.recover()
                if not self._stopping():
                    self._claim()
                if self.sweeper.due(time.time()):
                    self.sweeper.sweep()
            except Exception:  # a store hiccup must not end the loop
                log.exception("video jobs: store maintenance failed; retrying")
            self._wake.wait(POLL_S)
            self._wake.clear()

    def _renew(self) -> None:
        held = self.store.renew(self.owner, self.lease_s)
        for job_id, job in list(self.running.items()):
            status = held.get(job_id)
            if status is None or status == "cancelled":  # cancelled elsewhere, or taken away
                served = self._models.get(self._model_of.get(job_id, ""))
                if served is not None and served.engine is not None:
                    served.engine.cancel(job, "cancelled by the client")

    def _claim(self) -> None:
        with self._claim_lock:
            for model, served in self._models.items():
                room = self.room(model)
                if room <= 0 or served.status != "ready" or self._stopping():
                    continue
                for record in self.store.claim(self.owner, [model], room, self.lease_s):
                    self._run_claimed(served, record)

    def _run_claimed(self, served: ServedModel, record: JobRecord) -> None:
        try:
            self.submit(served, self._rebuild(served, record))
        except Exception as exc:  # noqa: BLE001 - a stale job must not block the others
            api = from_exception(exc)
            if self._stopping() or api.status in (429, 503):
                # no room after all, or stopping: back to the store for any server
                self.store.update(
                    record.id, only_active=True, if_owner=self.owner, owner=None, lease_until=None
                )
                return
            self.fail(record.id, api.code or "invalid_request", api.message)

    # -- submit -----------------------------------------------------------------------------

    def accept(self, served: ServedModel, gen: GenerationRequest, /, **record: Any) -> JobRecord:
        """Persist a new job (``record``: the store's ``create`` fields) and run it here when
        this server has room; else it waits in the store for any server (429 past
        ``max_queue`` waiting jobs of the model)."""
        here = self.room(served.id) > 0
        if not here and self.store.count(status="queued", model=served.id) >= self.max_queue:
            raise from_exception(
                QueueFullError(f"the video queue of {served.id!r} is full", retry_after=5.0)
            )
        created = self.store.create(
            **record, owner=self.owner if here else None, lease_s=self.lease_s
        )
        if here:
            try:
                self.submit(served, gen)
            except APIError:
                self.store.delete(created.id)
                raise
        else:
            self._wake.set()
        return created

    def submit(self, served: ServedModel, request: GenerationRequest) -> Job:
        """Run a job this server owns: progress and the outcome go to the store."""
        store, owner = self.store, self.owner
        job_id = request.request_id
        last = [-1]

        def on_start() -> None:
            self.io.submit(
                store.update, job_id, only_active=True, if_owner=owner, status="in_progress"
            )

        def on_progress(done: int, total: int) -> None:
            pct = min(99, int(100 * done / max(total, 1)))
            if pct != last[0]:
                last[0] = pct
                self.io.submit(store.update, job_id, only_active=True, if_owner=owner, progress=pct)

        job = Job(request, on_progress=on_progress, on_start=on_start)
        job.future.add_done_callback(lambda fut: self._done(job, fut))
        self.running[job_id] = job
        self._model_of[job_id] = served.id
        try:
            return self._submit(served, job)
        except Exception:
            self._forget(job_id)
            raise

    def _forget(self, job_id: str) -> None:
        self.running.pop(job_id, None)
        self._model_of.pop(job_id, None)
        self._wake.set()  # room for the next one

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
        self._forget(job_id)
        if isinstance(exc, EngineStoppedError) and (job.started_at is None or self._stopping()):
            return  # never started, or cut off by the shutdown: handed back (close)
        if isinstance(exc, RequestCancelledError):
            if self._stopping():  # cut off by the end of the grace period: handed back (close)
                return
            self.finalize(job_id, "cancelled", error={"code": "cancelled", "message": str(exc)})
            return
        api = from_exception(exc)
        self.fail(job_id, api.code or "generation_failed", api.message)

    def _write(self, job_id: str, result: GenerationResult) -> None:
        key = f"videos/{job_id}.mp4"
        try:
            frames, fps = media.frames_of(result)
            t0 = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="omni-video-") as tmp:
                path = Path(tmp) / "video.mp4"
                media.encode_mp4(frames, fps, path, media.sound_of(result))
                self.outputs.put_file(key, path)
            ran = stage_metrics.metrics(result, time.perf_counter() - t0)  # the record keeps them
        except Exception as exc:
            log.exception("video job %s: encoding or storing failed", job_id)
            self.fail(job_id, "encoding_failed", f"encoding the video failed: {exc}")
        else:
            self.finalize(job_id, "completed", output_path=key, progress=100, metrics=ran)
        finally:
            self._forget(job_id)

    def delete(self, job_id: str) -> None:
        """Remove a finished job and its files."""
        record = self.store.delete(job_id)
        if record is not None:
            for key in (record.output_path, record.input_path):
                if key:
                    self.outputs.delete(key)

    def fail(self, job_id: str, code: str, message: str) -> None:
        self.finalize(job_id, "failed", error={"code": code, "message": message})

    def finalize(self, job_id: str, status: str, *, mine: bool = True, **fields: Any) -> None:
        """Record a terminal status once (``mine``: only while this server owns the job; a job
        deleted, cancelled or taken away meanwhile is left alone)."""
        record = self.store.get(job_id)
        if record is None:
            return
        changed = self.store.update(
            job_id,
            only_active=True,
            if_owner=self.owner if mine else None,
            status=status,
            completed_at=int(time.time()),
            **fields,
        )
        if changed:
            self.metrics.jobs.labels(record.model, status).inc()
            log.info("video job %s %s", job_id, status)
