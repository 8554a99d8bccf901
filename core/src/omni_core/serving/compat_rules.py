"""What each foreign request field becomes, by endpoint: the tables of
:mod:`omni_core.serving.compat` (the one mechanism that applies them) and the types other
servers give those fields. Long because every endpoint's table lives here: one place to read
what any foreign field becomes and what it may hold.

A rule names one outcome per field (``sdk-docs/docs/compatibility.md`` has the policy as a
table): honoured (renamed, reshaped, merged, or a value meaning the model's default), refused
(400 ``unsupported_parameter``: a value asking for what the model cannot do), or accepted and
reported ignored (``X-Omni-Ignored-Fields``: a value that cannot change this output). Before
any of them, the field's value is checked against its type (400 ``invalid_value``), also where
this model ignores it: a client learns of its mistake whatever model it talks to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, TypeAdapter, ValidationError

from omni_core.contract.pipeline import Pipeline
from omni_core.serving.errors import invalid
from omni_core.speech.autoregressive import AutoregressiveSpeechPipeline
from omni_core.speech.pipeline import SpeechPipeline

Action = Literal["merge", "rename", "ignore", "refuse", "size", "unset"]


@dataclass(frozen=True)
class Rule:
    """What one foreign field becomes.

    ``type`` is what the field may hold (the other server's type and range): it is checked on
    every route, also where this model ignores the field, so a malformed value is a 400
    (``invalid_value``) and never silently dropped. ``shown`` is the JSON schema the OpenAPI
    document publishes for it (default: ``type``'s, narrowed to what ``accept`` takes when
    given).

    ``accept`` (for ``ignore``) tells the values that cannot change the output; any other
    value is refused with ``why``. For ``refuse`` it tells the values omni honours itself
    (kept as they are); only the others are refused. For ``unset`` it tells the values that
    name the model's default (``voice: "default"``, ``size: "auto"``): such a value is the
    same as leaving the field out.

    The rule does not apply, and the field is kept (name and value as they are), when the
    pipeline honours the field itself: ``native`` — its extras model declares it
    (:func:`declared_fields`); ``honoured`` — true of the pipeline (a shared field it uses,
    such as the token sampling of autoregressive voices, or one its declared members allow,
    such as reference audio for a model that clones voices); ``probe`` — the pipeline's
    ``validate`` takes the field with this value (a voice whose output a seed cannot steer
    refuses ``seed``: it is then ignored and reported).
    """

    action: Action
    target: str = ""
    why: str = ""
    accept: Callable[[Any], bool] | None = None
    native: bool = False
    honoured: Callable[[Pipeline], bool] | None = None
    type: Any = None
    shown: dict[str, Any] | None = None
    probe: bool = False

    @cached_property
    def adapter(self) -> TypeAdapter[Any] | None:
        return None if self.type is None else TypeAdapter(self.type)

    def check(self, name: str, value: Any) -> Any:
        """``value`` validated against :attr:`type` (a 400 naming ``name`` when it is not)."""
        if self.adapter is None:
            return value
        try:
            return self.adapter.validate_python(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise invalid(f"{name}: {first.get('msg', 'invalid value')}", name) from None

    def schema(self) -> dict[str, Any]:
        """The JSON schema the OpenAPI document publishes for the field."""
        if self.shown is not None:
            return dict(self.shown)
        return dict(self.adapter.json_schema()) if self.adapter is not None else {}


def _no_tool(value: Any) -> bool:
    return value in (None, "none", "auto")


def _falsy(value: Any) -> bool:
    return value in (None, False, "false", "False", "0", 0)


def _text_format(value: Any) -> bool:
    return value is None or (isinstance(value, dict) and value.get("type") == "text")


# -- the types other servers give their fields (checked wherever the field is accepted) --------

Text = Annotated[str, StringConstraints(max_length=256)]
Prose = Annotated[str, StringConstraints(max_length=32_000)]
Flag = bool | Literal["true", "false", "True", "False", "0", "1"]
Count = Annotated[int, Field(ge=0, le=1_000_000)]
_FALSE: dict[str, Any] = {"enum": [False]}
_EMPTY_LIST: dict[str, Any] = {"type": "array", "maxItems": 0}
_TOOL_CHOICE: dict[str, Any] = {"enum": ["none", "auto"]}
_TEXT_FORMAT: dict[str, Any] = {
    "type": "object",
    "properties": {"type": {"const": "text"}},
    "required": ["type"],
    "additionalProperties": False,
}
_FORMAT = dict[str, Any]  # OpenAI's response_format object: {"type": ...}
_TOOLS = list[dict[str, Any]]

_MERGE = Rule(
    "merge", why="an object of generation fields (vLLM-Omni's nested form)", type=dict[str, Any]
)
_SIZE = Rule("size", type=Annotated[int, Field(ge=1, le=8192)])
#: vLLM-Omni's per-output sizes on chat (one image per entry; ``test_different_sizes_001``).
_SIZES = Rule(
    "size",
    type=Annotated[int, Field(ge=1, le=8192)]
    | Annotated[list[Annotated[int, Field(ge=1, le=8192)]], Field(min_length=1, max_length=10)],
)
_CFG = Rule("rename", "guidance_scale", native=True)
_INTERNAL = "only steers the other server's scheduling; it cannot change this output"
_AUTO_SIZE = Rule(
    "unset",
    accept=lambda v: isinstance(v, str) and v.strip().lower() == "auto",
    why="'auto': the model's default size (an edit's: its input image's)",
)

#: The diffusion fields every image and video endpoint shares.
_DIFFUSION: dict[str, Rule] = {
    "extra_body": _MERGE,
    "width": _SIZE,
    "height": _SIZE,
    "size": _AUTO_SIZE,
    "true_cfg_scale": _CFG,
    "user": Rule("ignore", why="an end-user tag; omni does not track users", type=Text),
    "generator_device": Rule(
        "ignore",
        why="where the other server draws its noise",
        type=Annotated[str, Field(max_length=64)],
    ),
    "bot_task": Rule("ignore", why="a task tag of vLLM-Omni's benchmark client", type=Text),
}

#: OpenAI's image fields that steer OpenAI's own models only (quality tiers, styles).
_OPENAI_IMAGE: dict[str, Rule] = {
    "quality": Rule(
        "ignore",
        why="a quality tier of OpenAI's models; steps and size set this model's",
        type=Literal["auto", "standard", "hd", "low", "medium", "high"],
    ),
    "style": Rule(
        "ignore",
        why="a style of OpenAI's DALL-E 3; say it in the prompt",
        type=Literal["vivid", "natural"],
    ),
    "moderation": Rule(
        "ignore", why="OpenAI's content moderation level", type=Literal["low", "auto"]
    ),
    "background": Rule(
        "ignore",
        accept=lambda v: v in (None, "auto", "opaque"),
        why="transparent backgrounds are not made; every image is opaque",
        type=Literal["transparent", "opaque", "auto"],
        shown={"enum": ["auto", "opaque"]},
    ),
}

_IMAGE: dict[str, Rule] = {
    **_DIFFUSION,
    **_OPENAI_IMAGE,
    "num_outputs_per_prompt": Rule("rename", "n"),
    "response_format": Rule(
        "refuse",
        accept=lambda v: v in (None, "b64_json", "url", "file"),
        why="omni answers 'b64_json', 'url' (an absolute URL of the stored file) or 'file' "
        "(the image itself; a zip of them when n > 1)",
    ),
}

#: Chat fields of OpenAI's text models (and their types); an image model samples no tokens.
_CHAT_SAMPLING: dict[str, Any] = {
    "temperature": Annotated[float, Field(ge=0.0, le=2.0)],
    "top_p": Annotated[float, Field(ge=0.0, le=1.0)],
    "top_k": Annotated[int, Field(ge=-1, le=100_000)],
    "max_tokens": Annotated[int, Field(ge=1, le=1_000_000)],
    "max_completion_tokens": Annotated[int, Field(ge=1, le=1_000_000)],
    "presence_penalty": Annotated[float, Field(ge=-2.0, le=2.0)],
    "frequency_penalty": Annotated[float, Field(ge=-2.0, le=2.0)],
    "repetition_penalty": Annotated[float, Field(gt=0.0, le=10.0)],
    "stop": Text | Annotated[list[Text], Field(max_length=4)] | None,
    "logit_bias": dict[str, Annotated[float, Field(ge=-100, le=100)]],
    "service_tier": Literal["auto", "default", "flex", "scale", "priority"],
    "store": bool,
    "metadata": dict[str, Annotated[str, Field(max_length=512)]],
    "parallel_tool_calls": bool,
}

#: The token sampling of autoregressive voices (the same range where another voice ignores it).
_SPEECH_SAMPLING: dict[str, Any] = {
    "temperature": Annotated[float, Field(ge=0.0, le=2.0)],
    "top_p": Annotated[float, Field(gt=0.0, le=1.0)],
    "top_k": Annotated[int, Field(ge=0, le=100_000)],
}

_UNSAMPLED = "this penalty is not applied by omni's sampler (temperature, top_p, top_k, seed)"
_NO_TOOLS = "tool calls are not served"
_UNSTOPPED = "stop sequences are not served; an answer ends at the model's end token or max_tokens"


def _samples_tokens(pipeline: Pipeline) -> bool:
    """Autoregressive voices sample their tokens with the shared ``temperature``, ``top_p`` and
    ``top_k`` (the other voices sample none)."""
    return isinstance(pipeline, AutoregressiveSpeechPipeline)


def _clones_voices(pipeline: Pipeline) -> bool:
    return isinstance(pipeline, SpeechPipeline) and pipeline.clones_voices


def _has_default_voice(pipeline: Pipeline) -> bool:
    """A model with a voice named ``default`` means that one by ``voice: "default"``."""
    return isinstance(pipeline, SpeechPipeline) and any(
        v.id == "default" for v in pipeline.voices()
    )


_NO_CLONING = "this model does not clone voices from reference audio"


def _speaks_dialogue(pipeline: Pipeline) -> bool:
    """A model that speaks a multi-speaker script takes each speaker's voice (``speakers``)."""
    return isinstance(pipeline, SpeechPipeline) and pipeline.max_speakers > 1


#: ``speakers``: a speaker label of the script -> a voice id or an uploaded voice's name.
Speakers = Annotated[
    dict[
        Annotated[str, StringConstraints(min_length=1, max_length=64)],
        Annotated[str, StringConstraints(min_length=1, max_length=128)],
    ],
    Field(min_length=1, max_length=16),
]

#: vLLM-Omni's own speech fields (its extension of OpenAI's speech API), for a model whose
#: extras do not declare them (one that does honours them itself: ``native``). Their types are
#: vLLM-Omni's (``serving_speech.py``: instructions up to 500 characters, 1-4096 new tokens).
_VLLM_SPEECH: dict[str, Rule] = {
    "task_type": Rule(
        "ignore",
        native=True,
        accept=lambda v: v in (None, "CustomVoice"),
        why="vLLM-Omni's default task, 'CustomVoice', speaking in a voice of the model, is "
        "what this model does; another task needs a model whose extras take task_type",
        type=Literal["CustomVoice", "VoiceDesign", "Base"],
        shown={"enum": ["CustomVoice"]},
    ),
    "max_new_tokens": Rule(
        "ignore",
        native=True,
        why="a token budget; this model takes none",
        type=Annotated[int, Field(ge=1, le=4096)],
    ),
    "initial_codec_chunk_frames": Rule(
        "ignore", why=_INTERNAL, type=Annotated[int, Field(ge=0, le=4096)]
    ),
    "instructions": Rule(
        "ignore",
        native=True,
        why="this model takes no instructions (style or voice)",
        type=Annotated[str, StringConstraints(max_length=500)],
    ),
}


TABLES: dict[str, dict[str, Rule]] = {
    "images.generations": _IMAGE,
    "images.edits": {
        **_IMAGE,
        "input_fidelity": Rule(
            "ignore", why="a fidelity tier of OpenAI's models", type=Literal["high", "low"]
        ),
        "stream": Rule(
            "ignore",
            accept=_falsy,
            why="image edits do not stream; send stream=false",
            type=Flag,
            shown=_FALSE,
        ),
        "partial_images": Rule(
            "ignore",
            accept=_falsy,
            why="no partial images are streamed",
            type=Annotated[int, Field(ge=0, le=3)],
            shown={"const": 0},
        ),
    },
    "videos": {
        **_DIFFUSION,
        "video_params": _MERGE,
        "image_reference": Rule("rename", "input_reference"),
    },
    "chat": {
        **_DIFFUSION,
        "width": _SIZES,
        "height": _SIZES,
        **{
            name: Rule(
                "ignore", why="a text-sampling knob; image models sample no tokens", type=kind
            )
            for name, kind in _CHAT_SAMPLING.items()
        },
        "logprobs": Rule(
            "ignore",
            accept=_falsy,
            why="image outputs have no token logprobs",
            type=bool,
            shown=_FALSE,
        ),
        "top_logprobs": Rule(
            "ignore",
            accept=_falsy,
            why="image outputs have no logprobs",
            type=Annotated[int, Field(ge=0, le=20)],
            shown={"const": 0},
        ),
        "tools": Rule("refuse", why="tool calls need a text model; none is served", type=_TOOLS),
        "tool_choice": Rule(
            "ignore",
            accept=_no_tool,
            why=_NO_TOOLS,
            type=Literal["none", "auto", "required"] | dict[str, Any],
            shown=_TOOL_CHOICE,
        ),
        "response_format": Rule(
            "ignore",
            accept=_text_format,
            why="structured text output needs a text model; none is served",
            type=_FORMAT,
            shown=_TEXT_FORMAT,
        ),
        "audio": Rule(
            "refuse",
            why="this model makes images; audio answers need an omni model",
            type=dict[str, Any],
        ),
    },
    "chat.answers": {
        "extra_body": _MERGE,
        "max_completion_tokens": Rule("rename", "max_tokens"),
        "n": Rule(
            "ignore",
            accept=lambda v: v in (None, 1),
            why="one answer per request",
            type=Annotated[int, Field(ge=1, le=128)],
            shown={"const": 1},
        ),
        **{
            name: Rule(
                "ignore",
                accept=lambda v: v in (None, 0, 0.0),
                why=_UNSAMPLED,
                type=_CHAT_SAMPLING[name],
                shown={"const": 0},
            )
            for name in ("presence_penalty", "frequency_penalty")
        },
        "repetition_penalty": Rule(
            "ignore",
            accept=lambda v: v in (None, 1, 1.0),
            why=_UNSAMPLED,
            native=True,
            type=_CHAT_SAMPLING["repetition_penalty"],
            shown={"const": 1},
        ),
        "stop": Rule(
            "ignore",
            accept=lambda v: v in (None, [], ""),
            why=_UNSTOPPED,
            type=_CHAT_SAMPLING["stop"],
            shown=_EMPTY_LIST,
        ),
        "logit_bias": Rule(
            "ignore",
            accept=lambda v: not v,
            why="token biases are not served",
            type=_CHAT_SAMPLING["logit_bias"],
            shown={"type": "object", "maxProperties": 0},
        ),
        "logprobs": Rule(
            "ignore",
            accept=_falsy,
            why="token logprobs are not reported",
            type=bool,
            shown=_FALSE,
        ),
        "top_logprobs": Rule(
            "ignore",
            accept=_falsy,
            why="token logprobs are not reported",
            type=Annotated[int, Field(ge=0, le=20)],
            shown={"const": 0},
        ),
        "tools": Rule(
            "ignore", accept=lambda v: not v, why=_NO_TOOLS, type=_TOOLS, shown=_EMPTY_LIST
        ),
        "functions": Rule(
            "ignore", accept=lambda v: not v, why=_NO_TOOLS, type=_TOOLS, shown=_EMPTY_LIST
        ),
        "tool_choice": Rule(
            "ignore",
            accept=_no_tool,
            why=_NO_TOOLS,
            type=Literal["none", "auto", "required"] | dict[str, Any],
            shown=_TOOL_CHOICE,
        ),
        "function_call": Rule(
            "ignore",
            accept=_no_tool,
            why=_NO_TOOLS,
            type=Literal["none", "auto"] | dict[str, Any],
            shown=_TOOL_CHOICE,
        ),
        "parallel_tool_calls": Rule(
            "ignore", why="no tools are served: nothing to call", type=bool
        ),
        "response_format": Rule(
            "ignore",
            accept=_text_format,
            why="structured (JSON) output is not served; the answer is free text",
            type=_FORMAT,
            shown=_TEXT_FORMAT,
        ),
        "sampling_params_list": Rule(
            "refuse",
            native=True,
            why="vLLM-Omni's per-stage sampling; send temperature, top_p, top_k, seed and "
            "max_tokens at the top level (they steer the text)",
            type=list[dict[str, Any]],
        ),
        "user": Rule("ignore", why="an end-user tag; omni does not track users", type=Text),
        "metadata": Rule(
            "ignore", why="tags for OpenAI's stored completions", type=_CHAT_SAMPLING["metadata"]
        ),
        "store": Rule("ignore", why="omni stores no completions", type=bool),
        "service_tier": Rule("ignore", why=_INTERNAL, type=_CHAT_SAMPLING["service_tier"]),
    },
    "speech": {
        "extra_body": _MERGE,
        **_VLLM_SPEECH,
        "voice": Rule(
            "unset",
            accept=lambda v: v == "default",
            honoured=_has_default_voice,
            why="'default': the model's default voice",
        ),
        "seed": Rule(
            "ignore",
            probe=True,
            why="this voice's output cannot be seeded (its own noise is not ours to draw)",
            type=Annotated[int, Field(ge=0, lt=2**63)],
        ),
        "ref_audio": Rule("refuse", honoured=_clones_voices, why=_NO_CLONING, type=Prose),
        "ref_text": Rule("refuse", honoured=_clones_voices, why=_NO_CLONING, type=Prose),
        "speakers": Rule(
            "refuse",
            honoured=_speaks_dialogue,
            why="this model speaks one voice per request (give voice instead)",
            type=Speakers,
        ),
        **{
            name: Rule(
                "ignore",
                honoured=_samples_tokens,
                why="token sampling; this voice samples none",
                type=kind,
            )
            for name, kind in _SPEECH_SAMPLING.items()
        },
    },
}
