"""The one compatibility mechanism: other servers' request fields -> omni's, by the tables of
:mod:`omni_core.serving.compat_rules`.

Clients written for vLLM-Omni (and OpenAI's chat API) send names and semantics omni spells
differently. Every route passes its body through :func:`translate` with its endpoint's table,
and every field it names is type-checked (also where this model ignores it), then gets
exactly one of three outcomes (``sdk-docs/docs/compatibility.md``):

- **honoured**: renamed or reshaped onto omni's field (``width``/``height`` -> ``size``,
  ``num_outputs_per_prompt`` -> ``n``, a nested ``extra_body`` merged into the body), or a
  value naming the model's default (``voice: "default"``, ``size: "auto"``) taken as unset;
- **refused**: a 400 naming the field and why, when it would change the output and omni cannot
  do what it asks (``ref_audio``, ``lora`` where unsupported);
- **ignored and reported**: dropped only when it steers another server's internals and cannot
  change this output (``bot_task``, ``temperature`` of an image request); the names come back
  in the ``X-Omni-Ignored-Fields`` response header.

A value omni had to adjust to what the model accepts (a frame count rounded to 4k+1, an edit's
size taken from its input image) is said in ``X-Omni-Adjusted-Fields``. Nothing changes the
output silently. What a model honours itself is never the table's: its extras model declares
it (a field's name, or one of its validation aliases: :func:`declared_fields`), so the rule of
a field the pipeline declares does not apply and the value reaches the pipeline as it is. The
tables name no model family; the pipeline-aware steps (:func:`fit_frames`,
:func:`pipeline_field`, :func:`default_size`, a rule's ``probe``) ask the pipeline through its
declared members only: ``validate``, ``output_fps`` and ``extras_model``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from pydantic import AliasChoices

from omni_core.contract.errors import InvalidRequestError
from omni_core.contract.pipeline import Pipeline
from omni_core.contract.requests import make_request
from omni_core.serving.compat_rules import TABLES, Rule
from omni_core.serving.errors import APIError, invalid

#: Response headers of the report.
IGNORED_HEADER = "X-Omni-Ignored-Fields"
ADJUSTED_HEADER = "X-Omni-Adjusted-Fields"


@dataclass
class Report:
    """What :func:`translate` and the pipeline-aware steps did to one request."""

    ignored: list[str] = field(default_factory=list)
    adjusted: list[str] = field(default_factory=list)

    def headers(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.ignored:
            out[IGNORED_HEADER] = ", ".join(sorted(set(self.ignored)))
        if self.adjusted:
            out[ADJUSTED_HEADER] = "; ".join(self.adjusted)
        return out


def _json_object(name: str, value: Any) -> Any:
    """A merged object as multipart forms carry it: JSON text (``""``: none)."""
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            raise invalid(f"{name}: expected a JSON object", name) from None
    return value


def _merge(body: dict[str, Any], name: str, value: Mapping[str, Any]) -> None:
    for key, inner in value.items():
        key = str(key)
        if key in body and body[key] != inner:
            raise invalid(
                f"{key}: given both at the top level and in {name} with different values",
                key,
                code="duplicate_parameter",
            )
        body[key] = inner


def _size(body: dict[str, Any], rule: Rule) -> None:
    """``width`` + ``height`` -> ``size`` (checked against a ``size`` given too). On chat both
    may be lists (vLLM-Omni's per-output sizes): kept as they are for the route, which makes
    one image per entry."""
    width, height = body.pop("width", None), body.pop("height", None)
    if width is None and height is None:
        return
    if width is None or height is None:
        name = "width" if height is None else "height"  # the one given
        raise invalid(f"{name}: give width and height together (or size 'WxH')", name)
    width, height = rule.check("width", width), rule.check("height", height)
    if isinstance(width, list) or isinstance(height, list):
        if not (isinstance(width, list) and isinstance(height, list)) or len(width) != len(height):
            raise invalid(
                "width/height: per-output sizes are two lists of the same length", "width"
            )
        if body.get("size") is not None:
            raise invalid("size and per-output width/height lists: give one", "size")
        count = body.get("num_outputs_per_prompt")
        if count is not None and count != len(width):
            raise invalid(
                f"num_outputs_per_prompt={count!r} and {len(width)} per-output width/height "
                "entries: give as many entries as images per choice (vLLM-Omni's rule)",
                "num_outputs_per_prompt",
            )
        body["width"], body["height"] = width, height
        return
    size = f"{width}x{height}"
    given = body.get("size")
    if given is not None and str(given).lower() != size:
        raise invalid(f"size {given!r} and width/height {size} disagree; give one", "size")
    body["size"] = size


def _probe_accepts(pipeline: Pipeline, name: str, value: Any, body: Mapping[str, Any]) -> bool:
    """Whether ``pipeline.validate`` takes the shared field ``name`` at ``value`` (with the
    body's extras for this pipeline, e.g. Piper's noise scales)."""
    extras = {k: v for k, v in body.items() if k in pipeline.extras_model.model_fields}
    try:
        return _accepts(pipeline, {"prompt": "probe", name: value}, extras, name)
    except APIError:
        return True  # a malformed extra is the request's own 400, said by validation


def translate(
    endpoint: str,
    data: Mapping[str, Any],
    request: Request | None = None,
    pipeline: Pipeline | None = None,
) -> dict[str, Any]:
    """``data`` with ``endpoint``'s foreign fields honoured, refused (400) or ignored.

    Every field a rule names is type-checked first (:meth:`Rule.check`), also where this
    model ignores it. The report is kept on ``request.state.compat`` for :func:`headers`.
    """
    table = TABLES[endpoint]
    report = report_of(request)
    body = dict(data)
    for name, rule in table.items():  # merges first: their fields meet the other rules
        if rule.action == "merge" and name in body:
            _merge(body, name, rule.check(name, _json_object(name, body.pop(name))))
    declared = declared_fields(pipeline) if pipeline is not None else frozenset()
    for name, rule in table.items():
        if name not in body or rule.action in ("merge", "size"):
            continue
        value = body[name]
        if rule.native and name in declared:
            continue  # the pipeline honours it itself (an extra it declares)
        if rule.honoured is not None and pipeline is not None and rule.honoured(pipeline):
            continue
        if value is not None:
            rule.check(name, value)
        if rule.probe and pipeline is not None and _probe_accepts(pipeline, name, value, body):
            continue
        if rule.action == "rename":
            if rule.target == name:
                continue
            body.pop(name)
            if rule.target in body and body[rule.target] != value:
                raise invalid(
                    f"{name} and {rule.target} disagree; give one of them",
                    name,
                    code="duplicate_parameter",
                )
            body[rule.target] = value
        elif rule.action == "unset":
            if rule.accept is not None and rule.accept(value):
                body.pop(name)
        elif rule.action == "refuse":
            if rule.accept is not None and rule.accept(value):
                continue
            shown = f"{name}={value!r}" if rule.accept is not None else name
            raise invalid(f"{shown}: not supported: {rule.why}", name, code="unsupported_parameter")
        elif rule.action == "ignore":
            if rule.accept is not None and not rule.accept(value):
                raise invalid(
                    f"{name}={value!r} is not supported: {rule.why}",
                    name,
                    code="unsupported_parameter",
                )
            body.pop(name)
            report.ignored.append(name)
    size_rule = table.get("width")
    if size_rule is not None and size_rule.action == "size":
        _size(body, size_rule)
    return body


def declared_fields(pipeline: Pipeline) -> frozenset[str]:
    """The request fields ``pipeline``'s extras model declares: every field's name and the names
    its aliases accept. An alias is how a plugin takes another server's name for a field of
    its own (``Field(validation_alias=AliasChoices("style", "instructions"))``): the field is
    then the pipeline's, whatever the tables say of it."""
    names: set[str] = set()
    for name, info in pipeline.extras_model.model_fields.items():
        names.add(name)
        for alias in (info.alias, info.validation_alias):
            if isinstance(alias, str):
                names.add(alias)
            elif isinstance(alias, AliasChoices):
                names.update(choice for choice in alias.choices if isinstance(choice, str))
    return frozenset(names)


def model_of(data: Mapping[str, Any]) -> str | None:
    """The body's ``model`` before validation (routes pick the model first: the pipeline
    decides parts of the translation)."""
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise invalid("model: expected a string", "model")
    return model or None


def vllm_omni_status(error: APIError) -> APIError:
    """``error`` as an endpoint of vLLM-Omni's own (one OpenAI's API has not) answers it: a
    model this server does not serve is a 400 there, not OpenAI's 404 (the status table of
    ``sdk-docs/docs/compatibility.md``); every other error is the same everywhere."""
    if error.status == 404 and error.code == "model_not_found":
        return APIError(400, error.message, param=error.param, code=error.code)
    return error


def report_of(request: Request | None) -> Report:
    """The request's report (a fresh one without a request)."""
    if request is None:
        return Report()
    report = getattr(request.state, "compat", None)
    if report is None:
        report = Report()
        request.state.compat = report
    return report


def headers(request: Request) -> dict[str, str]:
    """The report's response headers (empty when nothing was ignored or adjusted)."""
    return report_of(request).headers()


def ignore(request: Request | None, name: str) -> None:
    """Record a field accepted and ignored by a route's own check."""
    report_of(request).ignored.append(name)


def adjust(request: Request | None, note: str) -> None:
    """Record a value adjusted to what the model accepts."""
    report_of(request).adjusted.append(note)


def _accepts(
    pipeline: Pipeline, fields: Mapping[str, Any], extras: Mapping[str, Any], param: str
) -> bool:
    """Whether the pipeline's ``validate`` takes ``fields`` as far as ``param`` goes."""
    try:
        pipeline.validate(make_request(fields, extras=extras, extras_at=None))
    except InvalidRequestError as exc:
        bad = {"width", "height", "size"} if param == "size" else {param}
        return exc.param not in bad
    except Exception:  # noqa: BLE001 - anything else is build_request's to report
        return True
    return True


def fit_frames(
    pipeline: Pipeline,
    fields: dict[str, Any],
    extras: Mapping[str, Any],
    request: Request | None = None,
    reach: int = 8,
) -> Any:
    """``fields["num_frames"]`` rounded to the nearest count the model accepts (vLLM-Omni
    sends e.g. 80 where Wan takes 4k+1), reported; unchanged when it is accepted already or
    no count is near (the pipeline's own 400 then says why)."""
    frames = fields.get("num_frames")
    if not isinstance(frames, int) or _accepts(pipeline, fields, extras, "num_frames"):
        return frames
    for delta in range(1, reach + 1):
        for candidate in (frames + delta, frames - delta):
            if candidate < 1:
                continue
            trial = {**fields, "num_frames": candidate}
            if _accepts(pipeline, trial, extras, "num_frames"):
                adjust(request, f"num_frames={frames}->{candidate} (what the model accepts)")
                return candidate
    return frames


def default_size(
    pipeline: Pipeline,
    fields: dict[str, Any],
    extras: Mapping[str, Any],
    image_size: tuple[int, int],
    request: Request | None = None,
) -> None:
    """No size given for an edit: the input image's, rounded to the model's multiple (as
    vLLM-Omni does), reported. Left to the pipeline's default when no rounding fits."""
    if "width" in fields or "height" in fields:
        return
    width, height = image_size
    for multiple in (1, 2, 4, 8, 16, 32, 64, 128):
        w = max(multiple, round(width / multiple) * multiple)
        h = max(multiple, round(height / multiple) * multiple)
        trial = {**fields, "width": w, "height": h}
        if _accepts(pipeline, trial, extras, "size"):
            fields["width"], fields["height"] = w, h
            note = "" if (w, h) == (width, height) else f", rounded to a multiple of {multiple}"
            adjust(request, f"size=auto->{w}x{h} (the input image's size{note})")
            return
    adjust(request, "size=auto->the model's default (the input image's size does not fit)")


def pipeline_field(
    pipeline: Pipeline,
    name: str,
    value: Any,
    actual: Any,
    extras: dict[str, Any],
    request: Request | None = None,
) -> None:
    """A field some pipelines take as an extra (``fps``, ``language``): honoured as the
    pipeline's extra when its extras model declares it; otherwise accepted (and reported) only
    when it equals what the pipeline produces anyway (``actual``), else a 400."""
    if name in declared_fields(pipeline):
        extras[name] = value
        return
    if actual is not None and str(value).lower() == str(actual).lower():
        ignore(request, name)
        return
    raise invalid(
        f"{name}={value!r}: this model cannot change it "
        f"({'it produces ' + repr(actual) if actual is not None else 'it has no such setting'})",
        name,
        code="unsupported_parameter",
    )
