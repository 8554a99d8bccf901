"""The served models and their lifecycle: load (through :class:`~omni_core.api.Omni`, the one
loader of the Python API and the CLI), warm up, report health, stop; and which model a request
means (:func:`pick`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from omni_core.chat.pipeline import ChatPipeline
from omni_core.contract.errors import (
    InvalidRequestError,
    OmniError,
    RequestFailedError,
    RequestOutOfMemoryError,
)
from omni_core.contract.requests import warmup_request
from omni_core.runtime.engine import Engine
from omni_core.runtime.jobs import EngineObserver
from omni_core.serving.config import ModelSource, ServerConfig
from omni_core.serving.errors import APIError
from omni_core.serving.estimates import RunTimeEstimate

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.api import Omni
    from omni_core.contract.pipeline import Pipeline
    from omni_core.contract.types import GenerationRequest, GenerationResult

log = logging.getLogger("omni.serving")

Modality = Literal["image", "video", "audio", "speech", "chat"]


def load_omni(source: ModelSource, config: ServerConfig) -> Omni:
    """Load one served model exactly as ``Omni(...)`` (and so ``omni generate``) would."""
    from omni_core.api import Omni

    return Omni(source.path, pipeline=source.pipeline, **config.load_options())


@dataclass(eq=False)
class ServedModel:
    """One model of the server and its lifecycle."""

    source: ModelSource
    status: Literal["loading", "ready", "failed"] = "loading"
    error: str | None = None
    omni: Omni | None = None
    engine: Engine | None = None
    modality: Modality | None = None
    tasks: tuple[str, ...] = ()
    created: int = field(default_factory=lambda: int(time.time()))
    #: Loaded by someone else (``create_app(preloaded=...)``): not ours to close.
    borrowed: bool = False
    #: Its measured speed, for refusing requests that would outrun the timeout.
    estimate: RunTimeEstimate = field(default_factory=RunTimeEstimate)

    @property
    def id(self) -> str:
        return self.source.id

    @property
    def pipeline(self) -> Pipeline:
        assert self.omni is not None, f"model {self.id} is not loaded"
        return self.omni.pipeline

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "model",
            "created": self.created,
            "owned_by": "omni",
            "status": self.status,
            "modality": self.modality,
            "tasks": list(self.tasks),
            "pipeline": self.omni.spec.name if self.omni is not None else None,
            "lora": self._lora(),
            **self._chat(),
        }

    def _chat(self) -> dict[str, Any]:
        """A chat model's answer modalities (``["text"]``, or with ``"audio"``) and voices."""
        if self.omni is None or not isinstance(self.omni.pipeline, ChatPipeline):
            return {}
        pipeline = self.omni.pipeline
        return {
            "modalities": list(pipeline.output_modalities),
            "voices": [v.id for v in pipeline.voices()],
        }

    def _lora(self) -> dict[str, Any] | None:
        """The adapters requests may name (``lora``), the fused one and the LRU state."""
        if self.omni is None or self.omni.pipeline.adapters is None:
            return None
        return self.omni.pipeline.adapters.describe()

    # -- lifecycle ------------------------------------------------------------------------------

    def load(
        self, config: ServerConfig, observer: EngineObserver, preloaded: Omni | None = None
    ) -> None:
        """Load (unless ``preloaded``), start the engine and warm it up; raises on failure."""
        t0 = time.perf_counter()
        omni = preloaded if preloaded is not None else load_omni(self.source, config)
        self.borrowed = preloaded is not None
        self.omni = omni
        self.modality = omni.spec.modality  # type: ignore[assignment]
        self.tasks = tuple(omni.spec.tasks)
        engine = Engine(
            omni.pipeline,
            name=self.id,
            max_batch=config.max_batch,
            max_queue=config.max_queue,
            request_timeout_s=config.request_timeout_s,
            observer=observer,
            batch_seeded=config.batch_seeded,
            admit_window_s=config.admit_window_ms / 1000,
        )
        self.engine = engine.start()
        if config.warmup:
            try:
                request, result = warm_up(omni.pipeline, engine, self.warmup_fields(config))
                self.estimate.observe(omni.pipeline, request, result)
            except BaseException:
                engine.stop(drain=False, timeout=5)
                raise
        self.status = "ready"
        log.info("model %s ready (%s, %.1f s)", self.id, omni.spec.name, time.perf_counter() - t0)

    def fail(self, exc: BaseException) -> None:
        """Mark the model failed; ``/health`` and 503s give the reason: an OmniError's own
        message (written for users), anything else with its type."""
        self.status = "failed"
        self.error = str(exc) if isinstance(exc, OmniError) else f"{type(exc).__name__}: {exc}"

    def warmup_fields(self, config: ServerConfig) -> dict[str, Any]:
        """The configured warm-up fields (``--warmup-request``) that apply to this model
        (frames only for video); the pipeline declares the rest (``warmup_fields``)."""
        fields = dict(config.warmup_request)
        if self.modality != "video":
            fields.pop("num_frames", None)
        return fields

    def check_health(self) -> bool:
        """Ready and still able to serve; a parallel model whose worker died becomes failed."""
        if self.status == "ready" and self.omni is not None and not self.omni.healthy:
            self.status = "failed"
            self.error = self.omni.pipeline.health_reason or "its worker processes died"
        return self.status == "ready"

    def stop(self, grace_s: float) -> None:
        """Finish what runs within ``grace_s``; queued work fails as never started."""
        if self.engine is not None:
            self.engine.stop(drain=False, timeout=grace_s)

    def close(self) -> None:
        """Leave no worker process behind (only for models this server loaded)."""
        if self.omni is not None and not self.borrowed:
            self.omni.close()


class WarmupError(OmniError):
    """A model's warm-up request was refused or ran out of memory: the message is the whole
    story (the pipeline's own reason and what to do), so the server logs it on one line."""


#: Fields a ``--warmup-request`` can set to make the warm-up smaller (memory-bound devices).
_SIZE_FIELDS = frozenset({"size", "width", "height", "num_frames"})
_SET_ONE = "set one with --warmup-request JSON or pass --no-warmup"


def warm_up(
    pipeline: Pipeline, engine: Engine, overrides: Mapping[str, Any]
) -> tuple[GenerationRequest, GenerationResult]:
    """Run the warm-up request the pipeline declares (with the ``--warmup-request`` fields) on
    ``engine``. Refused (the pipeline's InvalidRequestError) or out of memory: a WarmupError
    naming that cause; a size hint only where the size is the cause. Any other failure is a
    bug of the model, raised as such (the server logs its traceback). -> the request and its
    result (the server's run-time estimate learns from them)."""
    try:
        request = warmup_request(pipeline, overrides)
    except InvalidRequestError as exc:
        hint = (
            'choose a size it takes with --warmup-request \'{"width": W, "height": H}\' '
            "or pass --no-warmup"
            if exc.param in _SIZE_FIELDS
            else _SET_ONE
        )
        raise WarmupError(f"the warm-up request was refused: {exc.message}; {hint}") from None
    try:
        return request, engine.run(request, timeout=3600)
    except RequestOutOfMemoryError as exc:
        raise WarmupError(
            f"the warm-up request ran out of memory ({exc}); choose a size that fits with "
            '--warmup-request \'{"width": W, "height": H}\' or pass --no-warmup'
        ) from None
    except RequestFailedError as exc:
        raise RuntimeError(f"the warm-up request failed ({exc}); {_SET_ONE}") from exc


def pick(
    models: Mapping[str, ServedModel],
    model: str | None,
    modality: Modality | tuple[Modality, ...],
    task: str | None = None,
) -> ServedModel:
    """The served model a request names (or the only one of this modality), ready to serve;
    ``modality`` may be several (a route serving either)."""
    accepted = modality if isinstance(modality, tuple) else (modality,)
    if model is None:
        candidates = [m for m in models.values() if m.modality in accepted or m.status == "loading"]
        if len(candidates) != 1:
            raise APIError(
                400,
                f"missing required parameter: model (this server serves {', '.join(models)})",
                param="model",
                code="missing_required_parameter",
            )
        served = candidates[0]
    else:
        found = models.get(model)
        if found is None:
            raise APIError(
                404,
                f"the model {model!r} does not exist on this server; serving: {', '.join(models)}",
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
    if served.modality not in accepted:
        raise APIError(
            400,
            f"model {served.id!r} produces {served.modality}, not {' or '.join(accepted)}",
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
