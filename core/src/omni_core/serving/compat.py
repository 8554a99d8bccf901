"""The one compatibility mechanism: other servers' request fields -> omni's, by table. Long
because every endpoint's table lives here, next to the one function that applies them (one
place to read what any foreign field becomes).

Clients written for vLLM-Omni (and OpenAI's chat API) send names and semantics omni spells
differently. Every route passes its body through :func:`translate` with its endpoint's table,
and every field it names gets exactly one of three outcomes (``sdk-docs/docs/serving.md``):

- **honoured**: renamed or reshaped onto omni's field (``width``/``height`` -> ``size``,
  ``num_outputs_per_prompt`` -> ``n``, a nested ``extra_body`` merged into the body);
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
:func:`pipeline_field`, :func:`default_size`) ask the pipeline through its declared members
only: ``validate``, ``output_fps`` and ``extras_model``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import Request
from pydantic import AliasChoices

from omni_core.contract.errors import InvalidRequestError
from omni_core.contract.pipeline import Pipeline
from omni_core.contract.requests import make_request
from omni_core.serving.errors import invalid
from omni_core.speech.autoregressive import AutoregressiveSpeechPipeline
from omni_core.speech.pipeline import SpeechPipeline

Action = Literal["merge", "rename", "ignore", "refuse", "size"]

#: Response headers of the report.
IGNORED_HEADER = "X-Omni-Ignored-Fields"
ADJUSTED_HEADER = "X-Omni-Adjusted-Fields"


@dataclass(frozen=True)
class Rule:
    """What one foreign field becomes.

    ``accept`` (for ``ignore``) tells the values that cannot change the output; any other
    value is refused with ``why``. For ``refuse`` it tells the values omni honours itself
    (kept as they are); only the others are refused.

    The rule does not apply, and the field is kept (name and value as they are), when the
    pipeline honours the field itself: ``native`` — its extras model declares it
    (:func:`declared_fields`); ``honoured`` — true of the pipeline (a shared field it uses,
    such as the token sampling of autoregressive voices, or one its declared members allow,
    such as reference audio for a model that clones voices).
    """

    action: Action
    target: str = ""
    why: str = ""
    accept: Callable[[Any], bool] | None = None
    native: bool = False
    honoured: Callable[[Pipeline], bool] | None = None


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


def _no_tool(value: Any) -> bool:
    return value in (None, "none", "auto")


def _falsy(value: Any) -> bool:
    return value in (None, False, "false", "False", "0", 0)


_MERGE = Rule("merge", why="an object of generation fields (vLLM-Omni's nested form)")
_SIZE = Rule("size")
_CFG = Rule("rename", "guidance_scale", native=True)
_INTERNAL = "only steers the other server's scheduling; it cannot change this output"

#: The diffusion fields every image and video endpoint shares.
_DIFFUSION: dict[str, Rule] = {
    "extra_body": _MERGE,
    "width": _SIZE,
    "height": _SIZE,
    "true_cfg_scale": _CFG,
    "user": Rule("ignore", why="an end-user tag; omni does not track users"),
    "generator_device": Rule("ignore", why="where the other server draws its noise"),
}

_IMAGE: dict[str, Rule] = {
    **_DIFFUSION,
    "num_outputs_per_prompt": Rule("rename", "n"),
    "response_format": Rule(
        "refuse",
        accept=lambda v: v in (None, "b64_json", "url", "file"),
        why="omni answers 'b64_json', 'url' (an absolute URL of the stored file) or 'file' "
        "(the image itself; a zip of them when n > 1)",
    ),
}

#: Chat fields of OpenAI's text models; an image model has no tokens to sample.
_CHAT_SAMPLING = (
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "max_completion_tokens",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "stop",
    "logit_bias",
    "service_tier",
    "store",
    "metadata",
    "parallel_tool_calls",
)

_UNSAMPLED = "this penalty is not applied by omni's sampler (temperature, top_p, top_k, seed)"
_NO_TOOLS = "tool calls are not served"
_UNSTOPPED = "stop sequences are not served; an answer ends at the model's end token or max_tokens"


def _samples_tokens(pipeline: Pipeline) -> bool:
    """Autoregressive voices sample their tokens with the shared ``temperature``, ``top_p`` and
    ``top_k`` (the other voices sample none)."""
    return isinstance(pipeline, AutoregressiveSpeechPipeline)


def _clones_voices(pipeline: Pipeline) -> bool:
    return isinstance(pipeline, SpeechPipeline) and pipeline.clones_voices


_NO_CLONING = "this model does not clone voices from reference audio"

#: vLLM-Omni's own speech fields (its extension of OpenAI's speech API), for a model whose
#: extras do not declare them (one that does honours them itself: ``native``).
_VLLM_SPEECH: dict[str, Rule] = {
    "task_type": Rule(
        "ignore",
        native=True,
        accept=lambda v: v in (None, "CustomVoice"),
        why="vLLM-Omni's default task, 'CustomVoice', speaking in a voice of the model, is "
        "what this model does; another task needs a model whose extras take task_type",
    ),
    "max_new_tokens": Rule("ignore", native=True, why="a token budget; this model takes none"),
    "initial_codec_chunk_frames": Rule("ignore", why=_INTERNAL),
}


TABLES: dict[str, dict[str, Rule]] = {
    "images.generations": _IMAGE,
    "images.edits": {
        **_IMAGE,
        "bot_task": Rule("ignore", why="a task tag of vLLM-Omni's benchmark client"),
        "stream": Rule("ignore", accept=_falsy, why="image edits do not stream; send stream=false"),
        "partial_images": Rule("ignore", accept=_falsy, why="no partial images are streamed"),
    },
    "videos": {
        **_DIFFUSION,
        "video_params": _MERGE,
        "image_reference": Rule("rename", "input_reference"),
    },
    "chat": {
        **_DIFFUSION,
        **{
            name: Rule("ignore", why="a text-sampling knob; image models sample no tokens")
            for name in _CHAT_SAMPLING
        },
        "logprobs": Rule("ignore", accept=_falsy, why="image outputs have no token logprobs"),
        "top_logprobs": Rule("ignore", accept=_falsy, why="image outputs have no logprobs"),
        "tools": Rule("refuse", why="tool calls need a text model; none is served"),
        "tool_choice": Rule("ignore", accept=lambda v: v in (None, "none", "auto")),
        "response_format": Rule(
            "ignore",
            accept=lambda v: v is None or (isinstance(v, dict) and v.get("type") == "text"),
            why="structured text output needs a text model; none is served",
        ),
        "audio": Rule("refuse", why="this model makes images; audio answers need an omni model"),
    },
    "chat.answers": {
        "extra_body": _MERGE,
        "max_completion_tokens": Rule("rename", "max_tokens"),
        "n": Rule("ignore", accept=lambda v: v in (None, 1), why="one answer per request"),
        **{
            name: Rule("ignore", accept=lambda v: v in (None, 0, 0.0), why=_UNSAMPLED)
            for name in ("presence_penalty", "frequency_penalty")
        },
        "repetition_penalty": Rule(
            "ignore", accept=lambda v: v in (None, 1, 1.0), why=_UNSAMPLED, native=True
        ),
        "stop": Rule("ignore", accept=lambda v: v in (None, [], ""), why=_UNSTOPPED),
        "logit_bias": Rule("ignore", accept=lambda v: not v, why="token biases are not served"),
        "logprobs": Rule("ignore", accept=_falsy, why="token logprobs are not reported"),
        "top_logprobs": Rule("ignore", accept=_falsy, why="token logprobs are not reported"),
        "tools": Rule("ignore", accept=lambda v: not v, why=_NO_TOOLS),
        "functions": Rule("ignore", accept=lambda v: not v, why=_NO_TOOLS),
        "tool_choice": Rule("ignore", accept=_no_tool, why=_NO_TOOLS),
        "function_call": Rule("ignore", accept=_no_tool, why=_NO_TOOLS),
        "parallel_tool_calls": Rule("ignore", why="no tools are served: nothing to call"),
        "response_format": Rule(
            "ignore",
            accept=lambda v: v is None or (isinstance(v, dict) and v.get("type") == "text"),
            why="structured (JSON) output is not served; the answer is free text",
        ),
        "sampling_params_list": Rule(
            "refuse",
            native=True,
            why="vLLM-Omni's per-stage sampling; send temperature, top_p, top_k, seed and "
            "max_tokens at the top level (they steer the text)",
        ),
        "user": Rule("ignore", why="an end-user tag; omni does not track users"),
        "metadata": Rule("ignore", why="tags for OpenAI's stored completions"),
        "store": Rule("ignore", why="omni stores no completions"),
        "service_tier": Rule("ignore", why=_INTERNAL),
    },
    "speech": {
        "extra_body": _MERGE,
        **_VLLM_SPEECH,
        "ref_audio": Rule("refuse", honoured=_clones_voices, why=_NO_CLONING),
        "ref_text": Rule("refuse", honoured=_clones_voices, why=_NO_CLONING),
        **{
            name: Rule(
                "ignore", honoured=_samples_tokens, why="token sampling; this voice samples none"
            )
            for name in ("temperature", "top_p", "top_k")
        },
        "instructions": Rule(
            "ignore", native=True, why="this model takes no instructions (style or voice)"
        ),
    },
}


def _merge(body: dict[str, Any], name: str, value: Any) -> None:
    if isinstance(value, str):  # multipart forms carry it as JSON text
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            raise invalid(f"{name}: expected a JSON object", name) from None
    if not isinstance(value, Mapping):
        raise invalid(f"{name}: expected an object of generation fields", name)
    for key, inner in value.items():
        key = str(key)
        if key in body and body[key] != inner:
            raise invalid(
                f"{key}: given both at the top level and in {name} with different values",
                key,
                code="duplicate_parameter",
            )
        body[key] = inner


def _size(body: dict[str, Any]) -> None:
    width, height = body.pop("width", None), body.pop("height", None)
    if width is None and height is None:
        return
    if width is None or height is None:
        name = "width" if height is None else "height"  # the one given
        raise invalid(f"{name}: give width and height together (or size 'WxH')", name)
    try:
        w, h = int(width), int(height)
    except (TypeError, ValueError):
        raise invalid("width/height: expected integers", "width") from None
    size = f"{w}x{h}"
    given = body.get("size")
    if given not in (None, "auto") and str(given).lower() != size:
        raise invalid(f"size {given!r} and width/height {size} disagree; give one", "size")
    body["size"] = size


def translate(
    endpoint: str,
    data: Mapping[str, Any],
    request: Request | None = None,
    pipeline: Pipeline | None = None,
) -> dict[str, Any]:
    """``data`` with ``endpoint``'s foreign fields honoured, refused (400) or ignored.

    The report is kept on ``request.state.compat`` for :func:`headers`.
    """
    table = TABLES[endpoint]
    report = report_of(request)
    body = dict(data)
    for name, rule in table.items():  # merges first: their fields meet the other rules
        if rule.action == "merge" and name in body:
            _merge(body, name, body.pop(name))
    declared = declared_fields(pipeline) if pipeline is not None else frozenset()
    for name, rule in table.items():
        if name not in body or rule.action in ("merge", "size"):
            continue
        value = body[name]
        if rule.native and name in declared:
            continue  # the pipeline honours it itself (an extra it declares)
        if rule.honoured is not None and pipeline is not None and rule.honoured(pipeline):
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
    if any(table.get(k) is _SIZE for k in ("width", "height")):
        _size(body)
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
