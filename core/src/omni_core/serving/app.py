"""The OpenAI-compatible HTTP server: FastAPI routes in front of one :class:`Engine` per model.

Models load in a background thread after the socket is open, so ``/health`` can say 503 until
every model is loaded and warmed. Every request is validated (schema, then the pipeline's own
``validate``) before it reaches an engine; engines apply back-pressure (429) and run the work.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException

from omni_core.engine import (
    Engine,
    EngineStoppedError,
    Job,
    RequestCancelledError,
    warmup_request,
)
from omni_core.errors import InvalidRequestError
from omni_core.serving import media
from omni_core.serving.errors import (
    APIError,
    from_exception,
    from_validation_error,
    invalid,
)
from omni_core.serving.errors import install_handlers as _install_handlers
from omni_core.serving.metrics import Metrics
from omni_core.serving.persistence import TERMINAL, JobRecord, JobStore
from omni_core.serving.schemas import (
    ImageEditBody,
    ImageGenerationBody,
    SpeechBody,
    VideoBody,
    parse_size,
)

log = logging.getLogger("omni.serving")

#: GenerationRequest fields: an endpoint maps the ones it supports; others are not extras.
_SHARED = frozenset(
    {
        "prompt",
        "negative_prompt",
        "height",
        "width",
        "num_frames",
        "num_inference_steps",
        "guidance_scale",
        "seed",
        "num_outputs",
        "images",
        "voice",
        "speed",
        "sample_rate",
        "extras",
        "request_id",
    }
)

Modality = Literal["image", "video", "speech"]


class ModelSource(BaseModel):
    """A model to serve: its public id and where it loads from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    path: str = Field(min_length=1)
    pipeline: str | None = None


class ServerConfig(BaseModel):
    """Everything ``omni serve`` configures."""

    model_config = ConfigDict(extra="forbid")

    models: list[ModelSource] = Field(min_length=1)
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    api_key: str | None = None
    state_dir: Path = Field(default_factory=lambda: Path.home() / ".local/state/omni/serve")
    max_batch: int = Field(4, ge=1, le=256)
    max_queue: int = Field(64, ge=1)
    device: str | None = None
    dtype: str | None = None
    attention_backend: str | None = None
    #: Parallel layout of the served models (one worker process per device; see parallelism docs).
    cfg_parallel_size: int = Field(1, ge=1, le=2)
    ulysses_degree: int = Field(1, ge=1)
    max_upload_mb: float = Field(20.0, gt=0)
    max_images: int = Field(8, ge=1, le=64)
    allowed_url_hosts: tuple[str, ...] = ()
    request_timeout_s: float | None = Field(None, gt=0)
    #: Operator limits on what one request may cost (checked after the pipeline's defaults).
    max_steps: int | None = Field(None, ge=1)
    max_pixels: int | None = Field(None, ge=1)
    max_frames: int | None = Field(None, ge=1)
    warmup: bool = True
    #: Shared request fields of the warm-up of image and video models (e.g. a small size).
    warmup_request: dict[str, Any] = Field(default_factory=dict)
    shutdown_grace_s: float = Field(30.0, ge=0)
    #: Extra loading options passed to every pipeline (e.g. ``text_encoder_device``).
    options: dict[str, Any] = Field(default_factory=dict)

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1024 * 1024)

    @property
    def max_body_bytes(self) -> int:
        """Whole request body: room for ``max_images`` uploads (base64 for JSON) plus fields."""
        return int(self.max_upload_bytes * 1.4) * self.max_images + 1024 * 1024


@dataclass(eq=False)
class ServedModel:
    """One model of the server and its lifecycle."""

    source: ModelSource
    status: Literal["loading", "ready", "failed"] = "loading"
    error: str | None = None
    omni: Any = None
    engine: Engine | None = None
    modality: Modality | None = None
    tasks: tuple[str, ...] = ()
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def id(self) -> str:
        return self.source.id

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "model",
            "created": self.created,
            "owned_by": "omni",
            "status": self.status,
            "modality": self.modality,
            "tasks": list(self.tasks),
            "pipeline": getattr(getattr(self.omni, "spec", None), "name", None),
        }


class ServerState:
    """What the routes share: config, models, engines, the job store and metrics."""

    def __init__(self, config: ServerConfig, preloaded: dict[str, Any] | None = None) -> None:
        self.config = config
        self.metrics = Metrics()
        self.models: dict[str, ServedModel] = {s.id: ServedModel(s) for s in config.models}
        self.preloaded = dict(preloaded or {})
        self.store: JobStore | None = None
        self.video_jobs: dict[str, Job] = {}
        self.stopping = False
        self.allowed_hosts = frozenset(h.lower() for h in config.allowed_url_hosts)
        #: Encodes MP4s and writes job progress off the engine threads.
        self.io = ThreadPoolExecutor(max_workers=2, thread_name_prefix="omni-io")
        self.loader: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self.store = JobStore(self.config.state_dir)
        failed, _ = self.store.recover()
        for record in failed:
            log.warning(
                "video job %s was running when the server stopped: marked failed", record.id
            )
        self.loader = threading.Thread(target=self._load_all, name="omni-loader", daemon=True)
        self.loader.start()

    def _load_all(self) -> None:
        for served in self.models.values():
            try:
                self._load(served)
            except Exception as exc:
                served.status = "failed"
                served.error = f"{type(exc).__name__}: {exc}"
                log.exception("model %s failed to load", served.id)
        self._resume_queued()

    def _load(self, served: ServedModel) -> None:
        from omni_core.api import Omni

        t0 = time.perf_counter()
        omni = self.preloaded.get(served.id)
        if omni is None:
            options: dict[str, Any] = dict(self.config.options)
            if self.config.attention_backend:
                options["attention"] = self.config.attention_backend
            if self.config.cfg_parallel_size * self.config.ulysses_degree > 1:
                options.setdefault("cfg_parallel_size", self.config.cfg_parallel_size)
                options.setdefault("ulysses_degree", self.config.ulysses_degree)
            omni = Omni(
                served.source.path,
                pipeline=served.source.pipeline,
                device=self.config.device,
                dtype=self.config.dtype,
                **options,
            )
        served.omni = omni
        served.modality = omni.spec.modality
        served.tasks = tuple(omni.spec.tasks)
        engine = Engine(
            omni.pipeline,
            name=served.id,
            max_batch=self.config.max_batch,
            max_queue=self.config.max_queue,
            request_timeout_s=self.config.request_timeout_s,
            observer=self.metrics,
        )
        served.engine = engine.start()
        if self.config.warmup:
            try:
                engine.run(warmup_request(omni.pipeline, self._warmup_fields(served)), timeout=3600)
            except Exception as exc:
                engine.stop(drain=False, timeout=5)
                raise RuntimeError(
                    f"the warm-up request failed ({exc}); choose a size that fits with "
                    '--warmup-request \'{"width": W, "height": H}\' or pass --no-warmup'
                ) from exc
        served.status = "ready"
        self.metrics.ready.labels(served.id).set(1)
        log.info("model %s ready (%s, %.1f s)", served.id, omni.spec.name, time.perf_counter() - t0)

    def _warmup_fields(self, served: ServedModel) -> dict[str, Any]:
        """The configured warm-up fields that apply to this model (frames only for video; an
        input image for edit-only models)."""
        fields = dict(self.config.warmup_request)
        if served.modality != "video":
            fields.pop("num_frames", None)
        if "t2i" not in served.tasks and "t2v" not in served.tasks and "images" not in fields:
            from PIL import Image

            size = (fields.get("width") or 64, fields.get("height") or 64)
            fields["images"] = [Image.new("RGB", size, (128, 128, 128))]
        return fields

    def _resume_queued(self) -> None:
        """Queued video jobs of a previous run start again once their model is ready."""
        assert self.store is not None
        for record in self.store.list(status="queued", order="asc", limit=10_000):
            if record.id in self.video_jobs:
                continue
            served = self.models.get(record.model)
            if served is None or served.status != "ready":
                self._job_failed(
                    record.id,
                    "model_unavailable",
                    f"model {record.model!r} is not served by this server any more",
                )
                continue
            try:
                request = self._rebuild_video_request(served, record)
                self._submit_video(served, record.id, request)
            except Exception as exc:  # noqa: BLE001 - a stale job must not block the others
                api = from_exception(exc)
                self._job_failed(record.id, api.code or "invalid_request", api.message)

    def _rebuild_video_request(self, served: ServedModel, record: JobRecord) -> Any:
        kwargs = dict(record.request)
        if record.input_path:
            kwargs["images"] = [media.decode_image(Path(record.input_path).read_bytes())]
        return self.build_request(served, request_id=record.id, **kwargs)

    def shutdown(self) -> None:
        """Finish what runs within the grace period; queued video jobs stay queued on disk."""
        self.stopping = True
        stoppers = [
            threading.Thread(
                target=served.engine.stop,
                kwargs={"drain": False, "timeout": self.config.shutdown_grace_s},
            )
            for served in self.models.values()
            if served.engine is not None
        ]
        for thread in stoppers:  # every model gets the whole grace period, in parallel
            thread.start()
        for thread in stoppers:
            thread.join()
        for served in self.models.values():  # parallel workers: leave no process behind
            if served.omni is not None and served.id not in self.preloaded:
                served.omni.close()
        self.io.shutdown(wait=True)
        if self.store is not None:
            self.store.close()

    # -- models ---------------------------------------------------------------------------------

    def pick(self, model: str | None, modality: Modality, task: str | None = None) -> ServedModel:
        """The served model a request names (or the only one of this modality)."""
        if model is None:
            candidates = [
                m for m in self.models.values() if m.modality == modality or m.status == "loading"
            ]
            if len(candidates) != 1:
                raise APIError(
                    400,
                    "missing required parameter: model (this server serves "
                    f"{', '.join(self.models)})",
                    param="model",
                    code="missing_required_parameter",
                )
            served = candidates[0]
        else:
            found = self.models.get(model)
            if found is None:
                raise APIError(
                    404,
                    f"the model {model!r} does not exist on this server; serving: "
                    f"{', '.join(self.models)}",
                    param="model",
                    code="model_not_found",
                )
            served = found
        if served.status == "loading":
            raise APIError(
                503,
                f"model {served.id!r} is still loading",
                type="server_error",
                code="model_loading",
                headers={"Retry-After": "5"},
            )
        if served.status == "failed":
            raise APIError(
                503,
                f"model {served.id!r} failed to load: {served.error}",
                type="server_error",
                code="model_unavailable",
            )
        if served.modality != modality:
            raise APIError(
                400,
                f"model {served.id!r} produces {served.modality}, not {modality}",
                param="model",
                code="model_not_supported",
            )
        if task is not None and task not in served.tasks:
            raise APIError(
                400,
                f"model {served.id!r} does not support {task} (tasks: {', '.join(served.tasks)})",
                param="model",
                code="model_not_supported",
            )
        return served

    def build_request(self, served: ServedModel, **kwargs: Any) -> Any:
        """Shared fields + extras -> a validated GenerationRequest (400 on any problem)."""
        request_id = kwargs.pop("request_id", None)
        extras = kwargs.pop("extras", None) or {}
        for name in extras:
            if name in _SHARED or name in kwargs:
                raise APIError(
                    400, f"unknown parameter: {name}", param=name, code="unknown_parameter"
                )
        try:
            request = served.omni.request(**kwargs, **extras)
        except InvalidRequestError as exc:
            raise from_exception(exc) from None
        self._check_limits(request)
        if request_id is not None:
            request = request.model_copy(update={"request_id": request_id})
        return request

    def _check_limits(self, request: Any) -> None:
        c = self.config
        steps = request.num_inference_steps
        if c.max_steps is not None and steps is not None and steps > c.max_steps:
            raise invalid(
                f"num_inference_steps: {steps} is above this server's limit of {c.max_steps}",
                "num_inference_steps",
            )
        if c.max_pixels is not None and request.width and request.height:
            pixels = request.width * request.height
            if pixels > c.max_pixels:
                raise invalid(
                    f"size: {request.width}x{request.height} is above this server's "
                    f"limit of {c.max_pixels} pixels",
                    "size",
                )
        frames = request.num_frames
        if c.max_frames is not None and frames is not None and frames > c.max_frames:
            raise invalid(
                f"num_frames: {frames} is above this server's limit of {c.max_frames}", "num_frames"
            )

    def submit(self, served: ServedModel, job: Job) -> Job:
        if self.stopping:
            raise from_exception(EngineStoppedError("the server is shutting down"))
        assert served.engine is not None
        try:
            return served.engine.submit(job)
        except Exception as exc:  # noqa: BLE001 - mapped to its HTTP status
            raise from_exception(exc) from None

    # -- video jobs -----------------------------------------------------------------------------

    def _submit_video(self, served: ServedModel, job_id: str, request: Any) -> Job:
        store = self.store
        assert store is not None
        last = [-1]

        def on_start() -> None:
            self.io.submit(store.update, job_id, only_active=True, status="in_progress")

        def on_progress(done: int, total: int) -> None:
            pct = min(99, int(100 * done / max(total, 1)))
            if pct != last[0]:
                last[0] = pct
                self.io.submit(store.update, job_id, only_active=True, progress=pct)

        job = Job(request, on_progress=on_progress, on_start=on_start)
        job.future.add_done_callback(lambda fut: self._video_done(served, job, fut))
        self.video_jobs[job_id] = job
        self.submit(served, job)
        return job

    def _video_done(self, served: ServedModel, job: Job, fut: Any) -> None:
        job_id = job.id
        exc = fut.exception()
        if exc is None:
            try:
                self.io.submit(self._write_video, served, job_id, fut.result())
            except RuntimeError:  # the pool is shutting down: write it here
                self._write_video(served, job_id, fut.result())
            return
        self.video_jobs.pop(job_id, None)
        if isinstance(exc, EngineStoppedError) and job.started_at is None:
            return  # never started: stays queued on disk and runs after a restart
        if isinstance(exc, RequestCancelledError) and not self.stopping:
            self._finalize(job_id, "cancelled", error={"code": "cancelled", "message": str(exc)})
            return
        api = from_exception(exc)
        self._job_failed(job_id, api.code or "generation_failed", api.message)

    def _write_video(self, served: ServedModel, job_id: str, result: Any) -> None:
        assert self.store is not None
        try:
            frames, fps = media.frames_of(result)
            path = self.store.videos / f"{job_id}.mp4"
            media.encode_mp4(frames, fps, path)
        except Exception as exc:
            log.exception("video job %s: encoding failed", job_id)
            self._job_failed(job_id, "encoding_failed", f"encoding the video failed: {exc}")
        else:
            self._finalize(job_id, "completed", output_path=str(path), progress=100)
        finally:
            self.video_jobs.pop(job_id, None)

    def _job_failed(self, job_id: str, code: str, message: str) -> None:
        self._finalize(job_id, "failed", error={"code": code, "message": message})

    def _finalize(self, job_id: str, status: str, **fields: Any) -> None:
        assert self.store is not None
        record = self.store.get(job_id)
        if record is None:
            return
        self.store.update(job_id, status=status, completed_at=int(time.time()), **fields)
        self.metrics.jobs.labels(record.model, status).inc()
        log.info("video job %s %s", job_id, status)


_FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")

# -- helpers ------------------------------------------------------------------------------------


def _state(request: Request) -> ServerState:
    return request.app.state.omni


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise APIError(
            413,
            f"request body of {declared} bytes exceeds the limit of {limit}",
            code="request_too_large",
        )
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise APIError(
                413, f"request body exceeds the limit of {limit} bytes", code="request_too_large"
            )
        chunks.append(chunk)
    return b"".join(chunks)


async def _read_json(request: Request, state: ServerState) -> dict[str, Any]:
    body = await _read_body(request, state.config.max_body_bytes)
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise APIError(400, f"malformed JSON body: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise APIError(400, "the JSON body must be an object", code="invalid_json")
    return data


async def _read_form(request: Request, state: ServerState) -> FormData:
    declared = request.headers.get("content-length")
    limit = state.config.max_body_bytes
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise APIError(
            413,
            f"request body of {declared} bytes exceeds the limit of {limit}",
            code="request_too_large",
        )
    try:
        return await request.form(
            max_files=state.config.max_images,
            max_fields=200,
            max_part_size=state.config.max_upload_bytes,
        )
    except MultiPartException as exc:
        message = str(exc.message if hasattr(exc, "message") else exc)
        status = 413 if "exceed" in message.lower() or "too" in message.lower() else 400
        raise APIError(
            status,
            f"invalid multipart body: {message}",
            code="request_too_large" if status == 413 else "invalid_multipart",
        ) from None
    except (AssertionError, ValueError, UnicodeDecodeError) as exc:
        raise APIError(400, f"invalid multipart body: {exc}", code="invalid_multipart") from None


async def _upload_bytes(upload: UploadFile, param: str, state: ServerState) -> bytes:
    limit = state.config.max_upload_bytes
    data = await upload.read(limit + 1)
    if len(data) > limit:
        raise APIError(
            413,
            f"{param}: file larger than {state.config.max_upload_mb:g} MB",
            param=param,
            code="file_too_large",
        )
    return data


def _form_fields(form: FormData, skip: set[str]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key, value in form.multi_items():
        if key in skip or isinstance(value, UploadFile):
            continue
        if key in fields:
            raise invalid(f"{key}: given more than once", key, code="duplicate_parameter")
        fields[key] = value
    return fields


def _validate(model: type[BaseModel], data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


async def _await_job(
    state: ServerState, served: ServedModel, job: Job, request: Request | None = None
) -> Any:
    """Wait for a job; a client that disconnects first cancels it (at the next step)."""
    future = asyncio.wrap_future(job.future)
    watcher = asyncio.ensure_future(_disconnected(request)) if request is not None else None
    try:
        if watcher is not None:
            await asyncio.wait({future, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not future.done():
                raise asyncio.CancelledError
        return await future
    except asyncio.CancelledError:
        if served.engine is not None:
            served.engine.cancel(job, "the client disconnected")
        raise
    except Exception as exc:  # noqa: BLE001 - mapped to its HTTP status
        raise from_exception(exc) from None
    finally:
        if watcher is not None:
            watcher.cancel()


async def _disconnected(request: Request | None) -> None:
    """Returns when the client goes away (the body was read already: only disconnects come)."""
    if request is None:
        return
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _request_id(request: Request) -> str:
    """The client's ``x-request-id`` when it is sane, else a new one; echoed in the response."""
    given = request.headers.get("x-request-id", "")
    rid = given if re.fullmatch(r"[A-Za-z0-9._\-]{1,64}", given) else uuid.uuid4().hex
    request.state.request_id = rid
    return rid


def _diffusion_kwargs(body: Any) -> dict[str, Any]:
    width, height = parse_size(body.size)
    kwargs: dict[str, Any] = {"prompt": body.prompt}
    for name in ("negative_prompt", "seed", "num_inference_steps", "guidance_scale"):
        value = getattr(body, name)
        if value is not None:
            kwargs[name] = value
    if width is not None:
        kwargs["width"], kwargs["height"] = width, height
    kwargs["extras"] = body.extras()
    return kwargs


# -- the app ------------------------------------------------------------------------------------


def create_app(config: ServerConfig, *, preloaded: dict[str, Any] | None = None) -> FastAPI:
    """Build the FastAPI app; ``preloaded`` maps model ids to ready :class:`Omni` objects."""
    state = ServerState(config, preloaded)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.start()
        try:
            yield
        finally:
            await asyncio.to_thread(state.shutdown)

    app = FastAPI(
        title="omni",
        version=_version(),
        lifespan=lifespan,
        description="OpenAI-compatible image, video and speech generation.",
    )
    app.state.omni = state
    _install_handlers(app)
    app.add_middleware(_MetricsMiddleware, metrics=state.metrics)

    async def require_key(request: Request) -> None:
        key = config.api_key
        if not key:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), key.encode()
        ):
            raise APIError(
                401,
                "missing or invalid API key: send 'Authorization: Bearer KEY'",
                type="authentication_error",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(require_key)])
    _image_routes(v1, state)
    _video_routes(v1, state)
    _speech_routes(v1, state)

    @v1.get("/models", summary="List the served models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [m.describe() for m in state.models.values()]}

    @v1.get("/models/{model_id:path}", summary="Describe one served model")
    async def get_model(model_id: str) -> dict[str, Any]:
        served = state.models.get(model_id)
        if served is None:
            raise APIError(
                404,
                f"the model {model_id!r} does not exist on this server",
                param="model",
                code="model_not_found",
            )
        return served.describe()

    app.include_router(v1)

    @app.get("/health", summary="200 once every model is loaded and warmed, 503 before")
    async def health() -> JSONResponse:
        for m in state.models.values():
            # A parallel model whose worker process died: its requests fail, /health says why.
            if m.status == "ready" and m.omni is not None and not m.omni.healthy:
                m.status = "failed"
                m.error = getattr(m.omni.pipeline, "health_reason", None) or "workers died"
        models = {m.id: m.status for m in state.models.values()}
        ready = all(s == "ready" for s in models.values()) and not state.stopping
        body: dict[str, Any] = {"status": "ok" if ready else "unavailable", "models": models}
        errors = {m.id: m.error for m in state.models.values() if m.error}
        if errors:
            body["errors"] = errors
        return JSONResponse(
            body, status_code=200 if ready else 503, headers={} if ready else {"Retry-After": "5"}
        )

    @app.get("/metrics", summary="Prometheus metrics")
    async def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return app


def _version() -> str:
    from omni_core import __version__

    return __version__


def _json_schema(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema(ref_template="#/components/schemas/{model}")


def _body_spec(
    model: type[BaseModel],
    *,
    multipart: bool,
    json_body: bool,
    files: dict[str, bool],
    model_ids: list[str],
) -> dict[str, Any]:
    """OpenAPI requestBody for routes that parse their body by hand (JSON and/or multipart).

    ``model`` is documented as the enum of the served ids, so clients (and fuzzers) see them.
    """
    content: dict[str, Any] = {}
    schema = model.model_json_schema()
    schema.pop("$defs", None)
    if "model" in schema.get("properties", {}):
        schema["properties"]["model"] = {
            "type": "string",
            "enum": list(model_ids),
            "description": "A model id from /v1/models.",
        }
    if json_body:
        content["application/json"] = {"schema": schema}
    if multipart:
        props = {
            k: v
            for k, v in schema.get("properties", {}).items()
            if k not in files and "anyOf" not in v
        }
        for name in schema.get("properties", {}):
            if name not in files and name not in props:
                props[name] = {"type": "string"}
        for name, many in files.items():
            binary = {"type": "string", "format": "binary"}
            props[name] = {"type": "array", "items": binary} if many else binary
        required = [r for r in schema.get("required", []) if r in props]
        required += [n for n, many in files.items() if many]
        content["multipart/form-data"] = {
            "schema": {"type": "object", "properties": props, "required": required}
        }
    return {"requestBody": {"required": True, "content": content}}


# -- images -------------------------------------------------------------------------------------


def _image_routes(router: APIRouter, state: ServerState) -> None:
    async def respond(
        served: ServedModel, body: Any, job: Job, http_request: Request
    ) -> dict[str, Any]:
        result = await _await_job(state, served, job, http_request)
        images = list(result.images or [])
        fmt = body.output_format
        encoded = await asyncio.to_thread(lambda: [media.encode_image(im, fmt) for im in images])
        data = []
        for blob in encoded:
            if body.response_format == "url":
                assert state.store is not None
                name = f"{uuid.uuid4().hex}.{fmt}"
                (state.store.images / name).write_bytes(blob)
                data.append({"url": f"/v1/images/files/{name}"})
            else:
                data.append({"b64_json": media.b64(blob)})
        return {
            "created": int(time.time()),
            "data": data,
            "output_format": fmt,
            "usage": {"steps": int(result.timings.get("steps", 0))},
        }

    @router.post(
        "/images/generations",
        summary="Create images from a prompt",
        openapi_extra=_body_spec(
            ImageGenerationBody,
            multipart=False,
            json_body=True,
            files={},
            model_ids=list(state.models),
        ),
    )
    async def generations(request: Request) -> dict[str, Any]:
        body = _validate(ImageGenerationBody, await _read_json(request, state))
        served = state.pick(body.model, "image")
        kwargs = _diffusion_kwargs(body)
        gen = state.build_request(
            served, num_outputs=body.n, request_id=_request_id(request), **kwargs
        )
        job = state.submit(served, Job(gen))
        return await respond(served, body, job, request)

    @router.post(
        "/images/edits",
        summary="Edit one or more images given a prompt",
        openapi_extra=_body_spec(
            ImageEditBody,
            multipart=True,
            json_body=False,
            files={"image": True},
            model_ids=list(state.models),
        ),
    )
    async def edits(request: Request) -> dict[str, Any]:
        ctype = request.headers.get("content-type", "")
        if not ctype.startswith(_FORM_TYPES):
            raise APIError(
                415,
                "images/edits takes multipart/form-data with 'image' files",
                code="unsupported_media_type",
            )
        form = await _read_form(request, state)
        try:
            uploads = [
                v
                for k, v in form.multi_items()
                if k in ("image", "image[]") and isinstance(v, UploadFile)
            ]
            if any(isinstance(v, UploadFile) for k, v in form.multi_items() if k == "mask"):
                raise invalid(
                    "mask: masks are not supported; describe the edit in the prompt",
                    "mask",
                    code="unsupported_parameter",
                )
            fields = _form_fields(form, {"image", "image[]", "mask"})
            body = _validate(ImageEditBody, fields)
            if not uploads:
                raise APIError(
                    400,
                    "missing required parameter: image (one or more files)",
                    param="image",
                    code="missing_required_parameter",
                )
            served = state.pick(body.model, "image", task="i2i")
            images = []
            for i, upload in enumerate(uploads):
                param = "image" if len(uploads) == 1 else f"image[{i}]"
                data = await _upload_bytes(upload, param, state)
                images.append(await asyncio.to_thread(media.decode_image, data, param))
        finally:
            await form.close()
        kwargs = _diffusion_kwargs(body)
        gen = state.build_request(
            served, num_outputs=body.n, images=images, request_id=_request_id(request), **kwargs
        )
        job = state.submit(served, Job(gen))
        return await respond(served, body, job, request)

    @router.get("/images/files/{name}", summary="An image returned with response_format=url")
    async def image_file(name: str) -> FileResponse:
        assert state.store is not None
        if not re.fullmatch(r"[0-9a-f]{32}\.(png|jpeg|webp)", name):
            raise APIError(404, f"no image {name!r}", code="not_found")
        path = state.store.images / name
        if not path.is_file():
            raise APIError(404, f"no image {name!r}", code="not_found")
        return FileResponse(path, media_type=media.IMAGE_FORMATS[name.rsplit(".", 1)[1]][1])


# -- videos -------------------------------------------------------------------------------------


def _video_routes(router: APIRouter, state: ServerState) -> None:
    def record_or_404(video_id: str) -> JobRecord:
        assert state.store is not None
        record = state.store.get(video_id)
        if record is None:
            raise APIError(
                404, f"no video job {video_id!r}", param="video_id", code="video_not_found"
            )
        return record

    @router.post(
        "/videos",
        summary="Create a video job",
        openapi_extra=_body_spec(
            VideoBody,
            multipart=True,
            json_body=True,
            files={"input_reference": False},
            model_ids=list(state.models),
        ),
    )
    async def create_video(request: Request) -> dict[str, Any]:
        ctype = request.headers.get("content-type", "")
        image_bytes: bytes | None = None
        if ctype.startswith(_FORM_TYPES):
            form = await _read_form(request, state)
            try:
                upload = form.get("input_reference")
                if isinstance(upload, UploadFile):
                    image_bytes = await _upload_bytes(upload, "input_reference", state)
                fields = _form_fields(form, {"input_reference"} if upload is not None else set())
            finally:
                await form.close()
            body = _validate(VideoBody, fields)
        elif ctype.startswith("application/json") or not ctype:
            body = _validate(VideoBody, await _read_json(request, state))
            ref = body.input_reference
            if isinstance(ref, dict):
                ref = ref.get("image_url")
                if not isinstance(ref, str):
                    raise invalid("input_reference: expected {'image_url': URL}", "input_reference")
            if isinstance(ref, str):
                image_bytes = await media.fetch_url(
                    ref,
                    param="input_reference",
                    allowed_hosts=state.allowed_hosts,
                    max_bytes=state.config.max_upload_bytes,
                )
        else:
            raise APIError(
                415,
                "POST /v1/videos takes application/json or multipart/form-data",
                code="unsupported_media_type",
            )
        served = state.pick(body.model, "video")
        kwargs = _diffusion_kwargs(body)
        if body.num_frames is not None:
            kwargs["num_frames"] = body.num_frames
        elif body.seconds is not None:
            try:
                seconds = float(body.seconds)
            except ValueError:
                raise invalid("seconds: expected a number", "seconds") from None
            if not 0 < seconds <= 60:
                raise invalid("seconds: must be in (0, 60]", "seconds")
            fps = int(getattr(served.omni.pipeline, "default_fps", 16) or 16)
            kwargs["num_frames"] = round(seconds * fps) + 1
        images = []
        if image_bytes is not None:
            images.append(
                await asyncio.to_thread(media.decode_image, image_bytes, "input_reference")
            )
        job_id = f"video_{uuid.uuid4().hex}"
        request.state.request_id = job_id
        gen = state.build_request(served, images=images, request_id=job_id, **kwargs)
        assert state.store is not None
        input_path = None
        if images:
            input_path = str(state.store.inputs / f"{job_id}.png")
            await asyncio.to_thread(images[0].save, input_path)
        frames = gen.num_frames
        fps = int(getattr(served.omni.pipeline, "default_fps", 16) or 16)
        seconds_text = body.seconds or (f"{(frames - 1) / fps:g}" if frames else "")
        size_text = f"{gen.width}x{gen.height}" if gen.width and gen.height else (body.size or "")
        state.store.create(
            job_id=job_id,
            model=served.id,
            prompt=body.prompt,
            size=size_text,
            seconds=seconds_text,
            request=kwargs,
            input_path=input_path,
        )
        try:
            state._submit_video(served, job_id, gen)
        except APIError:
            state.video_jobs.pop(job_id, None)
            state.store.delete(job_id)
            raise
        record = state.store.get(job_id)
        assert record is not None
        return record.as_api()

    @router.get("/videos", summary="List video jobs")
    async def list_videos(
        limit: int = Query(20, ge=1, le=100),
        order: Literal["asc", "desc"] = "desc",
        after: str | None = Query(None, max_length=100),
    ) -> dict[str, Any]:
        assert state.store is not None
        records = state.store.list(order=order, limit=limit + 1, after=after)
        has_more = len(records) > limit
        data = [r.as_api() for r in records[:limit]]
        return {
            "object": "list",
            "data": data,
            "has_more": has_more,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }

    @router.get("/videos/{video_id}", summary="Get a video job")
    async def get_video(video_id: str) -> dict[str, Any]:
        return record_or_404(video_id).as_api()

    @router.get(
        "/videos/{video_id}/content",
        summary="Download the MP4 of a completed job",
        response_class=FileResponse,
    )
    async def video_content(
        video_id: str, variant: str = Query("video", max_length=20)
    ) -> FileResponse:
        record = record_or_404(video_id)
        if variant != "video":
            raise invalid(f"variant: only 'video' is available, not {variant!r}", "variant")
        if record.status != "completed" or not record.output_path:
            raise APIError(
                409,
                f"video {video_id} is {record.status}, not completed",
                param="video_id",
                code="video_not_ready",
            )
        path = Path(record.output_path)
        if not path.is_file():
            raise APIError(
                404,
                f"the content of video {video_id} is missing from the state dir",
                code="video_content_missing",
            )
        return FileResponse(path, media_type="video/mp4", filename=f"{video_id}.mp4")

    @router.delete("/videos/{video_id}", summary="Cancel a queued or running job, or delete one")
    async def delete_video(video_id: str) -> dict[str, Any]:
        record = record_or_404(video_id)
        assert state.store is not None
        if record.status in TERMINAL:
            await asyncio.to_thread(state.store.delete, video_id)
            return {"id": video_id, "object": "video.deleted", "deleted": True}
        job = state.video_jobs.get(video_id)
        served = state.models.get(record.model)
        if job is not None and served is not None and served.engine is not None:
            served.engine.cancel(job, "cancelled by the client")
            try:
                await asyncio.wait_for(asyncio.wrap_future(job.future), timeout=60)
            except Exception:  # noqa: BLE001 - the job's own outcome is recorded elsewhere
                pass
        else:
            state._finalize(
                video_id,
                "cancelled",
                error={"code": "cancelled", "message": "cancelled by the client"},
            )
        current = state.store.get(video_id)
        return {
            "id": video_id,
            "object": "video.deleted",
            "deleted": False,
            "status": current.status if current else "cancelled",
        }


# -- speech -------------------------------------------------------------------------------------


def _speech_routes(router: APIRouter, state: ServerState) -> None:
    @router.post(
        "/audio/speech",
        summary="Synthesize speech (whole file, chunked PCM or SSE)",
        response_class=Response,
        openapi_extra=_body_spec(
            SpeechBody, multipart=False, json_body=True, files={}, model_ids=list(state.models)
        ),
    )
    async def speech(request: Request) -> Response:
        body = _validate(SpeechBody, await _read_json(request, state))
        served = state.pick(body.model, "speech")
        kwargs: dict[str, Any] = {
            "prompt": body.input,
            "speed": body.speed,
            "extras": body.extras(),
        }
        if body.voice_id() is not None:
            kwargs["voice"] = body.voice_id()
        if body.seed is not None:
            kwargs["seed"] = body.seed
        gen = state.build_request(served, request_id=_request_id(request), **kwargs)
        streaming = body.stream or body.stream_format is not None
        if not streaming:
            job = state.submit(served, Job(gen))
            result = await _await_job(state, served, job, request)
            data = await asyncio.to_thread(
                media.encode_audio, result.audio, result.sample_rate, body.response_format
            )
            return Response(
                data,
                media_type=media.AUDIO_MEDIA_TYPES[body.response_format],
                headers={"x-omni-sample-rate": str(result.sample_rate)},
            )
        sse = body.stream_format == "sse"
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        job = Job(gen, on_chunk=lambda chunk: loop.call_soon_threadsafe(queue.put_nowait, chunk))
        job.future.add_done_callback(lambda fut: loop.call_soon_threadsafe(queue.put_nowait, fut))
        state.submit(served, job)
        engine = served.engine
        assert engine is not None
        try:
            first = await queue.get()
        except asyncio.CancelledError:
            engine.cancel(job, "the client disconnected")
            raise
        if not hasattr(first, "samples"):  # the future finished before any audio
            exc = first.exception()
            if exc is not None:
                raise from_exception(exc)
        rate = first.sample_rate if hasattr(first, "samples") else first.result().sample_rate
        # SSE carries base64 PCM deltas (OpenAI's speech.audio.delta); a raw stream is encoded.
        encoder, _ = media.stream_encoder("pcm" if sse else body.response_format, rate)

        async def chunks() -> AsyncIterator[Any]:
            item: Any = first
            try:
                while hasattr(item, "samples"):
                    yield item
                    item = await queue.get()
                yield item  # the finished future
            finally:
                if not job.future.done():
                    engine.cancel(job, "the client disconnected")

        async def audio_stream() -> AsyncIterator[bytes]:
            async for item in chunks():
                if hasattr(item, "samples"):
                    data = encoder.encode(item.samples)
                    if data:
                        yield data
                elif item.exception() is not None:
                    log.error("request %s failed mid-stream: %s", gen.request_id, item.exception())
                    return
                else:
                    tail = encoder.close()
                    if tail:
                        yield tail

        async def sse_stream() -> AsyncIterator[bytes]:
            samples = 0
            async for item in chunks():
                if hasattr(item, "samples"):
                    samples += len(item.samples)
                    event = {
                        "type": "speech.audio.delta",
                        "audio": base64.b64encode(encoder.encode(item.samples)).decode(),
                    }
                elif item.exception() is not None:
                    event = {
                        "type": "error",
                        "error": from_exception(item.exception()).body()["error"],
                    }
                else:
                    event = {
                        "type": "speech.audio.done",
                        "sample_rate": rate,
                        "audio_seconds": samples / rate,
                        "usage": {
                            "input_tokens": len(body.input),
                            "output_tokens": 0,
                            "total_tokens": len(body.input),
                        },
                    }
                yield f"data: {json.dumps(event)}\n\n".encode()

        headers = {"x-omni-sample-rate": str(rate), "Cache-Control": "no-cache"}
        if sse:
            return StreamingResponse(sse_stream(), media_type="text/event-stream", headers=headers)
        return StreamingResponse(audio_stream(), media_type=encoder.media_type, headers=headers)

    @router.get("/audio/voices", summary="Voices of the served speech models")
    async def voices(model: str | None = Query(None, max_length=500)) -> dict[str, Any]:
        data = []
        for served in state.models.values():
            if served.modality != "speech" or served.status != "ready":
                continue
            if model is not None and served.id != model:
                continue
            for voice in served.omni.pipeline.voices():
                data.append(
                    {
                        "id": voice.id,
                        "object": "voice",
                        "name": voice.name or voice.id,
                        "language": voice.language,
                        "description": voice.description,
                        "model": served.id,
                    }
                )
        if model is not None and model not in state.models:
            raise APIError(
                404,
                f"the model {model!r} does not exist on this server",
                param="model",
                code="model_not_found",
            )
        return {"object": "list", "data": data}


# -- metrics middleware -------------------------------------------------------------------------


class _MetricsMiddleware:
    """Per-route latency and status counts (route templates as labels, never raw paths)."""

    def __init__(self, app: Callable[..., Awaitable[None]], metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = [500]

        async def wrapped_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                rid = scope.get("state", {}).get("request_id")
                if rid:
                    message = {
                        **message,
                        "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())],
                    }
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                route = scope.get("route")
                endpoint = f"{scope['method']} {getattr(route, 'path', 'other')}"
                self.metrics.observe_request(endpoint, status[0], time.perf_counter() - t0)
            await send(message)

        await self.app(scope, receive, wrapped_send)
