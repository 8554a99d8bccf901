"""One request path: Python keywords or HTTP fields -> one validated :class:`GenerationRequest`.

The Python API (:meth:`omni_core.Omni.request`), ``omni generate`` and the server all build
their requests here, so a field means the same thing everywhere and a request is checked once::

    split_keywords(kwargs)                   # Python keywords -> shared fields + extras
    build_request(pipeline, fields, extras=..., request_id=..., limits=..., seconds=...)
        1. the schema: GenerationRequest, built once (a pydantic error names the field)
        2. seconds -> num_frames at the pipeline's real output fps (video clips)
        3. pipeline.validate, exactly once (a fused distill's steps / guidance are the
           defaults it fills in when the request has none)
        4. operator limits, after the pipeline filled in its defaults
        5. the ``lora`` adapters against the pipeline's (unknown names: 400), scales filled in

Which names are shared fields is derived from the schema (``GenerationRequest.model_fields``),
never copied by hand; everything else is an extra, validated by the pipeline's extras model.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from omni_core.contract.errors import InvalidRequestError
from omni_core.contract.pipeline import Adapters, Pipeline, StagedPipeline
from omni_core.contract.types import GenerationRequest, pixel_steps

#: Every field of the schema: none of them may be passed as an extra.
RESERVED_FIELDS: frozenset[str] = frozenset(GenerationRequest.model_fields)
#: The fields a caller sets by name (``extras`` and ``request_id`` are set by their own keyword).
SHARED_FIELDS: frozenset[str] = RESERVED_FIELDS - {"extras", "request_id"}


@dataclass(frozen=True)
class RequestLimits:
    """What one request may cost on this server (``omni serve --max-steps/...``); None: no limit.

    Checked after the pipeline's defaults are filled in, so a request that leaves the size (or
    a size derived from an input image) to the model is held to the same limits as one that
    names it. Every refusal is an InvalidRequestError naming the field and the limit.
    """

    max_steps: int | None = None
    max_pixels: int | None = None
    max_frames: int | None = None
    #: Most images (``num_outputs``, ``n`` over HTTP) one request may ask for.
    max_outputs: int | None = None
    #: Longest side over shortest side (a 2x4096 input image must not become a 32x46336 output).
    max_aspect_ratio: float | None = None
    #: The compute one request may ask for, in pixel-steps: width x height x frames x steps x
    #: outputs (each limit above can pass while their product is far beyond any real request).
    max_cost: int | None = None

    def check(self, request: GenerationRequest) -> None:
        steps = request.num_inference_steps
        if self.max_steps is not None and steps is not None and steps > self.max_steps:
            _over("num_inference_steps", steps, self.max_steps, "--max-steps")
        width, height = request.width, request.height
        if self.max_pixels is not None and width and height and width * height > self.max_pixels:
            _over("size", f"{width}x{height}", f"{self.max_pixels} pixels", "--max-pixels")
        if self.max_aspect_ratio is not None and width and height:
            ratio = max(width, height) / min(width, height)
            if ratio > self.max_aspect_ratio:
                _over(
                    "size",
                    f"{width}x{height} (aspect ratio {ratio:.3g})",
                    f"an aspect ratio of {self.max_aspect_ratio:g}",
                    "--max-aspect-ratio",
                )
        frames = request.num_frames
        if self.max_frames is not None and frames is not None and frames > self.max_frames:
            _over("num_frames", frames, self.max_frames, "--max-frames")
        outputs = request.num_outputs
        if self.max_outputs is not None and outputs is not None and outputs > self.max_outputs:
            _over("num_outputs", outputs, self.max_outputs, "--max-outputs", alias="n")
        cost = request_cost(request)
        if self.max_cost is not None and cost is not None and cost > self.max_cost:
            raise InvalidRequestError(
                f"this request asks for {request.width}x{request.height} pixels x "
                f"{frames or 1} frame(s) x {steps} steps x {outputs or 1} output(s) = {cost:,} "
                f"pixel-steps, above this server's budget of {self.max_cost:,} (--max-cost); "
                "ask for a smaller size, fewer frames, steps or outputs",
                param="size",
                code="limit_exceeded",
            )


def request_cost(request: GenerationRequest) -> int | None:
    """width x height x frames x steps x outputs of a diffusion request (None without a size
    or steps): :func:`~omni_core.contract.types.pixel_steps`, what ``--max-cost`` bounds."""
    return pixel_steps(request)


def _over(param: str, value: Any, limit: Any, flag: str, alias: str | None = None) -> None:
    name = f"{param} ({alias})" if alias else param
    raise InvalidRequestError(
        f"{name}: {value} is above this server's limit of {limit} ({flag})",
        param=alias or param,
        code="limit_exceeded",
    )


def split_keywords(kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Python keywords -> ``(shared fields, extras)``: shared fields by name, the rest extras.

    ``extras={...}`` is merged with the other unknown keywords; a name given both ways is an
    error (a shared field inside it is refused later, by :func:`build_request`).
    """
    kwargs = dict(kwargs)
    given = kwargs.pop("extras", None)
    shared = {k: v for k, v in kwargs.items() if k in SHARED_FIELDS}
    extras = {k: v for k, v in kwargs.items() if k not in SHARED_FIELDS}
    if given is not None:
        _check_mapping(given)
        twice = sorted(k for k in given if k in extras)
        if twice:
            raise InvalidRequestError(
                f"extras: {', '.join(map(repr, twice))} given both as a keyword and in extras",
                param=f"extras.{twice[0]}",
            )
        extras.update(given)
    return shared, extras


def make_request(
    fields: Mapping[str, Any],
    *,
    extras: Mapping[str, Any] | None = None,
    request_id: str | None = None,
    extras_at: str | None = "extras",
) -> GenerationRequest:
    """The schema step alone: shared ``fields`` + ``extras`` -> a GenerationRequest.

    No pipeline is involved: ``omni generate`` uses it before the weights load (the pipeline
    class's ``precheck`` then checks it against the checkpoint's configs). ``extras_at`` says
    where the caller put the extras, for error messages: ``"extras"`` (the Python keyword) or
    None (top-level fields of an HTTP body, where a shared name is an unknown parameter).
    """
    if extras is not None:
        _check_mapping(extras)
    extras = dict(extras or {})
    misplaced = sorted(k for k in extras if k in RESERVED_FIELDS)
    if misplaced:
        if extras_at is None:
            name = misplaced[0]
            raise InvalidRequestError(
                f"unknown parameter: {name} (this endpoint does not take it)",
                param=name,
                code="unknown_parameter",
            )
        raise InvalidRequestError(
            f"{extras_at}: {', '.join(map(repr, misplaced))} "
            f"{'is a shared field' if len(misplaced) == 1 else 'are shared fields'}; "
            f"set it by its own name, not inside {extras_at}",
            param=f"{extras_at}.{misplaced[0]}",
        )
    unknown = sorted(k for k in fields if k not in SHARED_FIELDS)
    if unknown:  # a caller bug, not a user's: fields are mapped by code
        raise TypeError(f"not shared request fields: {', '.join(unknown)}")
    values = dict(fields)
    images = values.get("images")
    if images is not None and not isinstance(images, list | tuple):
        values["images"] = [images]
    if request_id is not None:
        values["request_id"] = request_id
    try:
        return GenerationRequest(**values, extras=extras)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise InvalidRequestError(f"{param}: {first['msg']}", param=param) from None


def build_request(
    pipeline: Pipeline,
    fields: Mapping[str, Any],
    *,
    extras: Mapping[str, Any] | None = None,
    request_id: str | None = None,
    limits: RequestLimits | None = None,
    seconds: float | None = None,
    extras_at: str | None = "extras",
) -> GenerationRequest:
    """Shared ``fields`` + ``extras`` -> a request ``pipeline`` accepted (InvalidRequestError).

    ``seconds`` (a clip length, as OpenAI's videos API takes it) becomes
    ``num_frames = round(seconds * fps) + 1`` at the fps this pipeline really outputs for the
    request (:meth:`~omni_core.contract.pipeline.Pipeline.output_fps`); given together with
    ``num_frames``, the two must agree. See the module docstring for the order of the checks.
    """
    adapters = pipeline.adapters
    if adapters is not None:  # a fused distill's recommended steps / guidance
        fields = dict(fields)
        for key, value in adapters.request_defaults().items():
            if fields.get(key) is None:
                fields[key] = value
    request = make_request(fields, extras=extras, request_id=request_id, extras_at=extras_at)
    fps: int | None = None
    if seconds is not None:
        fps, frames = _frames_for(pipeline, request, seconds)
        if request.num_frames is not None and request.num_frames != frames:
            raise InvalidRequestError(
                f"seconds and num_frames disagree: {seconds:g} s at {fps} fps is {frames} "
                f"frames, num_frames is {request.num_frames}; give one of them",
                param="seconds",
            )
        request = make_request(
            {**fields, "num_frames": frames},
            extras=extras,
            request_id=request.request_id,
            extras_at=extras_at,
        )
    with _named_by_seconds(seconds, fps, request.num_frames):
        request = pipeline.validate(request)
        if limits is not None:
            limits.check(request)
    return check_lora_request(adapters, request)


def check_lora_request(adapters: Adapters | None, request: GenerationRequest) -> GenerationRequest:
    """A request's ``lora`` checked against the pipeline's adapters (400s)."""
    if adapters is None:
        if request.lora:
            raise InvalidRequestError(
                "lora: this model has no LoRA adapters loaded (omni serve --lora NAME=PATH)",
                param="lora",
            )
        return request
    return adapters.check_request(request)


def clip_seconds(pipeline: Pipeline, request: GenerationRequest) -> float | None:
    """How long the video ``request`` makes lasts, ``(num_frames - 1) / fps`` (the inverse of
    the ``seconds`` rule); None when the pipeline does not say its fps."""
    fps = pipeline.output_fps(request)
    if not fps or not request.num_frames:
        return None
    return (request.num_frames - 1) / fps


def warmup_request(
    pipeline: Pipeline, overrides: Mapping[str, Any] | None = None
) -> GenerationRequest:
    """The request that warms ``pipeline`` up: what it declares
    (:meth:`~omni_core.contract.pipeline.Pipeline.warmup_fields`), validated like any request.

    ``overrides`` (staged pipelines only: ``omni serve --warmup-request``) sets shared fields such
    as ``width``/``height``/``num_frames`` for checkpoints whose default size does not fit
    (memory-bound devices); speech and chat models warm up with their own request.
    """
    fields = dict(pipeline.warmup_fields())
    if isinstance(pipeline, StagedPipeline):
        fields.update(overrides or {})
    shared, extras = split_keywords(fields)
    return build_request(pipeline, shared, extras=extras, request_id="warmup")


def _check_mapping(extras: Any) -> None:
    if not isinstance(extras, Mapping):
        raise InvalidRequestError(
            f"extras: expected a dict, got {type(extras).__name__}", param="extras"
        )


def _frames_for(pipeline: Pipeline, request: GenerationRequest, seconds: float) -> tuple[int, int]:
    if not (math.isfinite(seconds) and seconds > 0):
        raise InvalidRequestError(
            f"seconds: must be a positive number, not {seconds}", param="seconds"
        )
    fps = pipeline.output_fps(request)
    if not fps:
        raise InvalidRequestError(
            "seconds: this model does not say its frame rate; pass num_frames instead",
            param="seconds",
        )
    return fps, round(seconds * fps) + 1


@contextmanager
def _named_by_seconds(seconds: float | None, fps: int | None, frames: int | None) -> Iterator[None]:
    """A refused frame count the caller gave as ``seconds`` is reported as ``seconds``."""
    try:
        yield
    except InvalidRequestError as exc:
        if seconds is None or exc.param != "num_frames":
            raise
        raise InvalidRequestError(
            f"seconds: {seconds:g} s at {fps} fps is {frames} frames, refused: {exc.message}",
            param="seconds",
            code=exc.code,
        ) from None


__all__ = [
    "RESERVED_FIELDS",
    "SHARED_FIELDS",
    "RequestLimits",
    "build_request",
    "clip_seconds",
    "make_request",
    "split_keywords",
    "warmup_request",
]
