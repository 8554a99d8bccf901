"""What the routes share: the config, the served models, the stores (jobs, outputs, uploaded
voices), the video jobs, the transcripts of recent spoken answers and the metrics.

Models load in a background thread after the socket is open, so ``/health`` can say 503 until every
model is loaded and warmed. Requests are built by :func:`omni_core.contract.requests.build_request`
(the one request path of the Python API and the CLI too): the schema, then the pipeline's own
``validate`` once, then the operator limits; engines apply back-pressure (429) and run the work.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import EngineStoppedError, InvalidRequestError, OmniError
from omni_core.contract.requests import build_request
from omni_core.contract.types import GenerationRequest
from omni_core.runtime.jobs import Job
from omni_core.serving import media
from omni_core.serving.config import ServerConfig
from omni_core.serving.errors import APIError, from_exception
from omni_core.serving.jobs import VideoJobs
from omni_core.serving.metrics import Metrics
from omni_core.serving.models import ServedModel
from omni_core.serving.stores import (
    JobRecord,
    JobStore,
    OutputStore,
    open_job_store,
    open_output_store,
)
from omni_core.serving.stores.probe import probe
from omni_core.serving.timings import TimingsLog
from omni_core.speech.voices import VoiceStore

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.api import Omni

log = logging.getLogger("omni.serving")

#: Seconds between two probes of the state folder (``/health``).
STORAGE_PROBE_S = 2.0


class Transcripts:
    """The transcripts of recent spoken chat answers, by audio id: a later turn may name an
    earlier answer by ``audio.id`` alone (OpenAI's multi-turn audio). Each is kept until its
    ``expires_at``; past ``limit`` the oldest go first."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._kept: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, audio_id: str, expires_at: float, transcript: str) -> None:
        with self._lock:
            self._kept[audio_id] = (float(expires_at), transcript)
            self._prune()

    def live(self) -> dict[str, str]:
        """The transcripts not expired yet, by audio id."""
        with self._lock:
            self._prune()
            return {audio_id: text for audio_id, (_, text) in self._kept.items()}

    def _prune(self) -> None:
        now = time.time()
        kept = self._kept
        while kept and (len(kept) > self.limit or next(iter(kept.values()))[0] < now):
            kept.popitem(last=False)


class ServerState:
    """The server's shared state and its lifecycle (:meth:`start`, :meth:`shutdown`)."""

    def __init__(self, config: ServerConfig, preloaded: Mapping[str, Omni] | None = None) -> None:
        self.config = config
        self.metrics = Metrics()
        self.models: dict[str, ServedModel] = {s.id: ServedModel(s) for s in config.models}
        self.preloaded = dict(preloaded or {})
        self.store: JobStore | None = None
        #: Outputs, video inputs and images answered by URL (any replica serves them).
        self.outputs: OutputStore | None = None
        self._jobs: VideoJobs | None = None
        self.stopping = False
        self.allowed_hosts = frozenset(h.lower() for h in config.allowed_url_hosts)
        #: Encodes MP4s and writes job progress off the engine threads.
        self.io = ThreadPoolExecutor(max_workers=2, thread_name_prefix="omni-io")
        self.loader: threading.Thread | None = None
        #: Recent spoken chat answers' transcripts (``/v1/chat/completions``).
        self.transcripts = Transcripts()
        self._voices: VoiceStore | None = None
        self._drain_lock = threading.Lock()
        self._drained = False
        self._storage_checked = -STORAGE_PROBE_S
        self._storage_problem: str | None = None
        self._storage_lock = threading.Lock()
        #: Server-side timestamps of streamed requests (``--timings-log``), or None.
        self.timings = TimingsLog(config.timings_log) if config.timings_log else None

    @property
    def jobs(self) -> VideoJobs:
        assert self._jobs is not None, "the server has not started"
        return self._jobs

    @property
    def voices(self) -> VoiceStore:
        """The uploaded voices (``/v1/audio/voices``), under the state dir: opened on first use,
        so a server that never sees a voice creates no folder for them."""
        if self._voices is None:
            self._voices = VoiceStore(self.config.state_dir)
        return self._voices

    def storage_problem(self) -> str | None:
        """Why the state folder cannot take writes now (read-only, full), or None; probed at
        most every :data:`STORAGE_PROBE_S` seconds however often ``/health`` is asked."""
        with self._storage_lock:
            now = time.monotonic()
            if now - self._storage_checked >= STORAGE_PROBE_S:
                min_free = self.config.storage.min_free_bytes
                self._storage_problem = probe(self.config.state_dir, min_free)
                self._storage_checked = now
            return self._storage_problem

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        storage = self.config.storage
        self.outputs = open_output_store(storage.output_store, self.config.state_dir)
        self.outputs.check()
        self.store = open_job_store(storage.job_store, self.config.state_dir)
        self._jobs = VideoJobs(
            self.store,
            self.outputs,
            submit=self.submit,
            rebuild=self._rebuild_video_request,
            metrics=self.metrics,
            io=self.io,
            stopping=lambda: self.stopping,
            storage=storage,
            capacity=self.config.max_batch,
            max_queue=self.config.max_queue,
        )
        requeued, failed = self._jobs.recover()
        for record in requeued:
            log.warning(
                "video job %s was running when its server stopped: queued again (restart %d)",
                record.id,
                record.restarts,
            )
        for record in failed:
            log.warning("video job %s stopped the server too often: marked failed", record.id)
        self.loader = threading.Thread(target=self._load_all, name="omni-loader", daemon=True)
        self.loader.start()

    def _load_all(self) -> None:
        for served in self.models.values():
            try:
                served.load(self.config, self.metrics, self.preloaded.get(served.id))
            except OmniError as exc:  # written for users (a refused warm-up, a bad path)
                served.fail(exc)
                log.error("model %s failed to load: %s", served.id, served.error)
            except Exception as exc:
                served.fail(exc)
                log.exception("model %s failed to load", served.id)
            else:
                self.metrics.ready.labels(served.id).set(1)
        self.jobs.start(self.models)  # queued jobs (ours from before, anyone's) run now

    def drain(self) -> None:
        """Stop admissions at once (503) and let running work finish within the grace period.

        Queued work never starts: its video jobs stay ``queued`` on disk for the next start.
        Idempotent: ``omni serve`` calls it on SIGTERM while the socket still answers, and
        :meth:`shutdown` calls it again.
        """
        self.stopping = True
        with self._drain_lock:
            if self._drained:
                return
            stoppers = [
                threading.Thread(target=served.stop, args=(self.config.shutdown_grace_s,))
                for served in self.models.values()
            ]
            for thread in stoppers:  # every model gets the whole grace period, in parallel
                thread.start()
            for thread in stoppers:
                thread.join()
            self._drained = True

    def shutdown(self) -> None:
        """Finish what runs within the grace period; queued video jobs stay queued on disk."""
        self.drain()
        for served in self.models.values():  # parallel workers: leave no process behind
            served.close()
        self.io.shutdown(wait=True)
        if self._jobs is not None:
            self._jobs.close()  # what was cut off goes back to the store for any server
        if self.store is not None:
            self.store.close()
        if self.outputs is not None:
            self.outputs.close()

    # -- requests -------------------------------------------------------------------------------

    def build_request(
        self,
        served: ServedModel,
        fields: Mapping[str, Any],
        *,
        extras: Mapping[str, Any] | None = None,
        request_id: str | None = None,
        seconds: float | None = None,
    ) -> GenerationRequest:
        """Shared fields + the body's extras -> a validated request (400 on any problem, and
        for one estimated to outrun the request timeout: omni_core.serving.estimates)."""
        try:
            request = build_request(
                served.pipeline,
                fields,
                extras=extras,
                request_id=request_id,
                limits=self.config.limits,
                seconds=seconds,
                extras_at=None,  # extras are top-level fields of the body
            )
            served.estimate.check(served.pipeline, request, self.config.request_timeout_s)
            return request
        except InvalidRequestError as exc:
            raise from_exception(exc) from None

    def _rebuild_video_request(self, served: ServedModel, record: JobRecord) -> GenerationRequest:
        fields = dict(record.request)
        extras = fields.pop("extras", None)
        if record.input_path:
            assert self.outputs is not None
            data = self.outputs.get(record.input_path)
            if data is None:
                raise APIError(400, "the input image of this job has expired", code="input_missing")
            fields["images"] = [media.decode_image(data)]
        return self.build_request(served, fields, extras=extras, request_id=record.id)

    def submit(self, served: ServedModel, job: Job) -> Job:
        """Queue ``job`` on its model's engine (429 when full, 503 while shutting down)."""
        if self.stopping:
            raise from_exception(EngineStoppedError("the server is shutting down"))
        if served.engine is None:
            raise APIError(503, f"model {served.id!r} is not running", type="server_error")
        try:
            served.engine.submit(job)
        except Exception as exc:  # noqa: BLE001 - mapped to its HTTP status
            raise from_exception(exc) from None

        def learn(future: Any) -> None:  # its speed, for the next estimates
            if not future.cancelled() and future.exception() is None:
                served.estimate.observe(served.pipeline, job.request, future.result())

        job.future.add_done_callback(learn)
        return job
