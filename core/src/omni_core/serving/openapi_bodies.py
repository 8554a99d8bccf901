"""The request bodies the OpenAPI document publishes: per served model, what that model accepts
on each endpoint, so that generated clients and fuzzers agree with the server. Every
endpoint's body has its own shape (JSON and multipart forms, chat messages, speech's whole-file
and streamed variants; the diffusion ones are :mod:`omni_core.serving.openapi_diffusion`'s),
each assembled from the same three sources:

- the route's body model (:mod:`omni_core.serving.schemas`): the fields and their ranges;
- the compatibility tables (:mod:`omni_core.serving.compat_rules`): other servers' fields a
  model accepts and ignores, with their types (what is renamed stays out: the schema names
  omni's field once, and ``x-omni-aliases`` says the other names);
- the model itself (:mod:`omni_core.serving.probes`): the sizes, frame counts, steps, counts,
  voices and extras it takes under this server's limits, found by asking it.

Each model is one branch of a ``oneOf`` told apart by ``model`` (a ``discriminator``); a
branch forbids any other property (``additionalProperties: false``), since an unknown field is
a 400. Strings exclude NUL characters (the server refuses them anywhere). What JSON Schema
cannot say is said in descriptions and ``x-omni-*`` keys: the pixel-steps budget
(``--max-cost``), and the pixels of uploaded images (an edit without ``size`` takes its input
image's size, so an image over ``--max-pixels`` needs a ``size``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from omni_core.chat.pipeline import ChatPipeline
from omni_core.media.audio import SAMPLE_RATES
from omni_core.serving import compat, probes
from omni_core.serving.openapi_diffusion import chat_image_branch, image_branch, video_branch
from omni_core.serving.openapi_fields import NOT_BLANK, field_schemas, ignored_fields, model_branch
from omni_core.serving.schemas import (
    AudioGenerationBody,
    ChatAnswerBody,
    ChatBody,
    ImageEditBody,
    ImageGenerationBody,
    SpeechBody,
    VideoBody,
)
from omni_core.speech.autoregressive import AutoregressiveSpeechPipeline
from omni_core.speech.pipeline import SpeechPipeline, StreamingSpeechPipeline

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.serving.models import ServedModel
    from omni_core.serving.state import ServerState

#: The body model of each endpoint whose body is published per model.
ENDPOINTS: dict[type[BaseModel], str] = {
    ImageGenerationBody: "images.generations",
    ImageEditBody: "images.edits",
    VideoBody: "videos",
    SpeechBody: "speech",
    ChatBody: "chat",
    AudioGenerationBody: "audio.generate",
}


# -- chat: chat models' answers -----------------------------------------------------------------


def chat_answer_branch(served: ServedModel, one: bool) -> dict[str, Any]:
    """A chat model's body for ``/v1/chat/completions`` (text, and speech of omni models)."""
    pipeline = served.pipeline
    assert isinstance(pipeline, ChatPipeline)
    fields = field_schemas(ChatAnswerBody)
    fields.pop("model", None)
    modalities = list(pipeline.output_modalities)
    fields["modalities"] = {
        "type": "array",
        "items": {"type": "string", "enum": modalities},
        "minItems": 1,
        "maxItems": len(modalities),
        "uniqueItems": True,
    }
    if "audio" in modalities:
        voices = [v.id for v in pipeline.voices()]
        fields["audio"] = {
            "type": "object",
            "properties": {
                "voice": {"type": "string", "enum": voices} if voices else {"type": "string"},
                "format": {"type": "string", "enum": ["wav", "mp3", "flac", "pcm16"]},
            },
            "additionalProperties": False,
        }
    else:
        fields.pop("audio", None)
    fields["messages"] = {
        "type": "array",
        "minItems": 1,
        "maxItems": 256,
        "items": {
            "type": "object",
            "properties": {
                "role": {"type": "string", "enum": ["system", "developer", "user", "assistant"]},
                "content": {"type": "string", "maxLength": 32_000, "pattern": NOT_BLANK},
            },
            "required": ["role", "content"],
            "additionalProperties": False,
        },
        "description": "The conversation (text, image_url, input_audio, audio_url and "
        "video_url parts are taken too: sdk-docs chat page).",
    }
    props = {**fields, **ignored_fields("chat.answers", pipeline)}
    return model_branch(served.id, props, ["messages"], one)


# -- speech -------------------------------------------------------------------------------------


def speech_branches(state: ServerState, served: ServedModel, one: bool) -> list[dict[str, Any]]:
    """A speech model's bodies for ``/v1/audio/speech``: whole files (any ``sample_rate``) and
    streams (at the model's own rate: a stream is not resampled), as two branches."""
    pipeline = served.pipeline
    assert isinstance(pipeline, SpeechPipeline)
    probe = probes.Probe(state, served)
    speakable = pipeline.speakable()
    char = probes.speakable_char(speakable)
    base = {"prompt": char}
    if not probe.ok(base):
        return []
    longest = probes.bounds(lambda n: probe.ok({"prompt": char * int(n)}), 1, 4096, 1, integer=True)
    fields = field_schemas(SpeechBody)
    inner = speakable or "[^\\s\\x00]"
    props: dict[str, dict[str, Any]] = {
        "input": {
            "type": "string",
            "minLength": 1,
            "maxLength": int(longest[1]) if longest else 4096,
            "pattern": f"^[^\\x00]*{inner}[^\\x00]*$",
            "description": "The text to speak"
            + (f" (this voice says only {speakable}, dropping the rest)" if speakable else "")
            + ".",
        }
    }
    voices = [v.id for v in pipeline.voices()]
    named = voices + ([] if "default" in voices else ["default"])
    props["voice"] = {
        "type": "string",
        "enum": named,
        "description": "A voice of the model; 'default': its default voice.",
    }
    props["response_format"] = fields["response_format"]
    speed = probes.bounds(lambda v: probe.ok({**base, "speed": v}), 0.25, 4.0, 1.0, integer=False)
    if speed:
        props["speed"] = {"type": "number", "minimum": speed[0], "maximum": speed[1]}
    props["seed"] = {
        "type": "integer",
        "minimum": 0,
        "maximum": 2**63 - 1,
        "description": "Reproducible output; a voice that cannot be seeded reports it ignored "
        "(X-Omni-Ignored-Fields).",
    }
    languages = {v.language for v in pipeline.voices()}
    declared = compat.declared_fields(pipeline)
    if "language" not in declared:
        if None in languages or not languages:
            props["language"] = fields["language"]
        elif len(languages) == 1:
            props["language"] = {"type": "string", "enum": ["Auto", *sorted(languages)]}
        else:
            props["language"] = {"type": "string", "enum": ["Auto"]}
    if isinstance(pipeline, AutoregressiveSpeechPipeline):
        for name in ("temperature", "top_p", "top_k"):
            props[name] = fields[name]
    props.update(probes.extras(probe, base, []))
    props.update(ignored_fields("speech", pipeline))
    if pipeline.clones_voices:
        props["ref_audio"] = {
            "type": "string",
            "format": "audio-data-url",
            "description": "Reference audio to clone: a data URL (or base64, an allowed URL).",
        }
        props["ref_text"] = {"type": "string", "maxLength": 4096}
    if pipeline.max_speakers > 1:
        props["speakers"] = {
            "type": "object",
            "maxProperties": pipeline.max_speakers,
            "additionalProperties": {"type": "string", "minLength": 1, "maxLength": 128},
            "description": "A multi-speaker script's voices: a speaker label of the input -> "
            "a voice of the model or an uploaded voice.",
        }
    whole = dict(props)
    whole["stream"] = {"enum": [False]}
    rates = [r for r in SAMPLE_RATES if probe.ok({**base, "sample_rate": r})]
    if rates:
        whole["sample_rate"] = {
            "type": "integer",
            "enum": rates,
            "description": "Resample to this rate (Hz).",
        }
    streamed = dict(props)
    streamed["stream"] = {"type": "boolean"}
    streamed["stream_format"] = {"type": "string", "enum": ["sse", "audio"]}
    native = pipeline.sample_rate if isinstance(pipeline, StreamingSpeechPipeline) else None
    if native:
        streamed["sample_rate"] = {
            "enum": [native],
            "description": "A stream comes at the model's own rate.",
        }
    sse = {k: v for k, v in streamed.items() if k != "stream_format"}
    sse["stream"] = {"enum": [True]}
    return [
        {**model_branch(served.id, whole, ["input"], one), "title": f"{served.id} (whole file)"},
        {
            **model_branch(served.id, streamed, ["input", "stream_format"], one),
            "title": f"{served.id} (stream_format)",
        },
        {
            **model_branch(served.id, sse, ["input", "stream"], one),
            "title": f"{served.id} (stream: true, server-sent events)",
        },
    ]


# -- the bodies of an endpoint --------------------------------------------------------------------


def candidates(state: ServerState, modalities: tuple[str, ...]) -> list[ServedModel]:
    return [m for m in state.models.values() if m.modality in modalities]


def branches(state: ServerState, endpoint: str, *, multipart: bool) -> list[dict[str, Any]]:
    """Every served model's body for ``endpoint`` (those that take none are left out)."""
    out: list[dict[str, Any]] = []
    if endpoint in ("images.generations", "images.edits"):
        models = candidates(state, ("image",))
        for served in models:
            if endpoint == "images.edits" and "i2i" not in served.tasks:
                continue
            branch = image_branch(state, served, endpoint, len(models) == 1, multipart=multipart)
            out += [branch] if branch else []
    elif endpoint == "videos":
        models = candidates(state, ("video",))
        for served in models:
            branch = video_branch(state, served, len(models) == 1, multipart=multipart)
            out += [branch] if branch else []
    elif endpoint == "speech":
        models = candidates(state, ("speech",))
        for served in models:
            out += speech_branches(state, served, len(models) == 1)
    elif endpoint == "audio.generate":
        models = [m for m in candidates(state, ("audio",)) if "t2a" in m.tasks]
        fields = field_schemas(AudioGenerationBody)
        fields.pop("model", None)
        for served in models:
            probe = probes.Probe(state, served)
            props = dict(fields)
            longest = probes.bounds(
                lambda s, p=probe: p.ok({"prompt": "a", "duration_s": s}), 1e-3, 600.0, 1e-3,
                integer=False,
            )  # fmt: skip
            if longest is None:
                continue
            for name in ("audio_length", "audio_end_in_s"):
                props[name] = {**props[name], "maximum": longest[1]}
            props.pop("exclusiveMaximum", None)
            out.append(model_branch(served.id, props, ["input"], len(models) == 1))
    elif endpoint == "chat":
        models = candidates(state, ("image", "chat"))
        for served in models:
            if served.modality == "chat":
                out.append(chat_answer_branch(served, len(models) == 1))
            else:
                branch = chat_image_branch(state, served, len(models) == 1)
                out += [branch] if branch else []
    return out


def body_schema(branches_: list[dict[str, Any]]) -> dict[str, Any]:
    """One endpoint's body: the branch itself when there is one, else a ``oneOf`` of them told
    apart by ``model``. The top level lists every property (multipart encodings apply to
    top-level properties) and ``additionalProperties: false``; each branch narrows it."""
    if not branches_:
        return {"not": {}, "description": "No served model takes this body."}
    if len(branches_) == 1:
        return branches_[0]
    union: dict[str, Any] = {}
    for branch in branches_:
        for name, prop in branch["properties"].items():
            union[name] = prop if union.get(name, prop) == prop else {}
    required = set.intersection(*(set(b["required"]) for b in branches_))
    return {
        "type": "object",
        "properties": union,
        "required": sorted(required),
        "additionalProperties": False,
        "oneOf": branches_,
    }
