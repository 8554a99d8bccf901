"""What a request carries and what it produces: the types every lane and shell shares.

:class:`GenerationRequest` is the one request schema (shared fields by name; a pipeline's own
knobs in ``extras``, validated by its ``extras_model``); :class:`GenerationResult` is what any
request produced. Speech deltas (:class:`AudioChunk`), voices and the voice a request clones
live here too, because requests and results carry them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    from PIL import Image


class NoExtras(BaseModel):
    """Extras model of a pipeline that takes none: any extra is an error."""

    model_config = ConfigDict(extra="forbid")


class LoraRef(BaseModel):
    """One LoRA adapter a request asks for, by the name it was loaded under (``--lora``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=128)
    #: None: the scale the adapter was loaded with (``--lora NAME=PATH:SCALE``, default 1).
    scale: float | None = Field(None, ge=-10.0, le=10.0)


@dataclass
class PreparedVoice:
    """What a speech pipeline made of a reference voice once
    (:meth:`~omni_core.speech.SpeechPipeline.prepare_voice`): tensors (a speaker embedding, prompt
    codes) and JSON-able facts; the server stores both with an uploaded voice so that later requests
    (and restarts) skip the preparation."""

    tensors: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class ReferenceVoice:
    """A voice to clone: reference audio (float32 mono at ``sample_rate``) and its transcript,
    and/or what the pipeline prepared from them (``prepared``: set for uploaded voices)."""

    audio: Any = None  # np.ndarray
    sample_rate: int | None = None
    transcript: str | None = None
    prepared: PreparedVoice | None = None
    #: The uploaded voice's name (None: reference audio sent with the request).
    name: str | None = None


class GenerationRequest(BaseModel):
    """The shared request schema. Model-specific knobs go in ``extras`` (the pipeline's model)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    prompt: str = Field("", description="Text prompt (or, for speech, the text to speak).")
    negative_prompt: str | None = None
    height: int | None = Field(None, gt=0, le=8192)
    width: int | None = Field(None, gt=0, le=8192)
    num_frames: int | None = Field(None, gt=0, le=1024)
    num_inference_steps: int | None = Field(None, ge=1, le=1000)
    guidance_scale: float | None = Field(None, ge=0.0, le=100.0)
    seed: int | None = Field(None, ge=0, lt=2**63)
    num_outputs: int = Field(1, ge=1, le=16, description="Outputs per prompt (OpenAI's n).")
    images: list[Any] = Field(default_factory=list, description="Conditioning PIL images.")
    voice: str | None = None
    speed: float = Field(1.0, ge=0.25, le=4.0)
    sample_rate: int | None = Field(None, ge=8000, le=192000)
    # text to audio (task t2a): the clip's length and its start in the model's timeline
    duration_s: float | None = Field(None, gt=0.0, le=3600.0, description="Audio: seconds made.")
    audio_start_s: float | None = Field(None, ge=0.0, le=3600.0, description="Audio: its start.")
    lora: tuple[LoraRef, ...] = Field(
        (), description="LoRA adapters (loaded ones, by name) and scales for this request."
    )
    reference: ReferenceVoice | None = Field(
        None, description="Speech: a voice to clone (reference audio or an uploaded voice)."
    )
    speakers: dict[str, str | ReferenceVoice] = Field(
        default_factory=dict,
        max_length=16,
        description="Speech, a multi-speaker script: each speaker's voice by the label the "
        "script names it with (a voice id of the model, or a voice to clone). The pipeline's "
        "``max_speakers`` bounds it; its labels are the model's.",
    )
    stream: bool = Field(
        False,
        description="The caller reads the answer as it is made (streamed speech or chat); "
        "pipelines may then decode in smaller chunks. Set by the server, not by clients.",
    )
    # chat (text and omni models): the conversation, decoded (omni_core.chat.ChatMessage)
    messages: list[Any] = Field(
        default_factory=list, description="Chat: the conversation (ChatMessage objects)."
    )
    modalities: tuple[Literal["text", "audio"], ...] = Field(
        ("text",), description="Chat: what the answer holds."
    )
    max_tokens: int | None = Field(None, ge=1, le=32768, description="Chat: answer tokens.")
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="Chat: 0 is greedy.")
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0, le=100000, description="Chat: 0 keeps every token.")
    extras: dict[str, Any] = Field(default_factory=dict)
    request_id: str = Field(default_factory=lambda: uuid.uuid4().hex)

    @field_validator("lora", mode="before")
    @classmethod
    def _lora_forms(cls, value: Any) -> Any:
        """A name, one ``{name, scale}`` object (vLLM-Omni's form) or a list of either."""
        if value is None:
            return ()
        if isinstance(value, str | Mapping):
            value = [value]
        if isinstance(value, list | tuple):
            return tuple({"name": v} if isinstance(v, str) else v for v in value)
        return value

    def lora_key(self) -> tuple[tuple[str, float | None], ...]:
        """The adapters and scales as a hashable key (requests that differ never share a step)."""
        return tuple((ref.name, ref.scale) for ref in self.lora)


def pixel_steps(request: GenerationRequest) -> int | None:
    """width x height x frames x steps x outputs of a diffusion request (None without a size
    or steps: speech, or a pipeline that left them open): ``--max-cost``'s measure and the
    default :meth:`~omni_core.contract.pipeline.Pipeline.work_units`."""
    if not (request.width and request.height and request.num_inference_steps):
        return None
    return (
        request.width
        * request.height
        * (request.num_frames or 1)
        * request.num_inference_steps
        * (request.num_outputs or 1)
    )


@dataclass
class GenerationResult:
    """What a request produced, plus how long each stage took."""

    images: list[Image.Image] | None = None
    video: np.ndarray | None = None  # frames x H x W x 3, uint8
    fps: int | None = None
    audio: np.ndarray | None = None  # float32 PCM in [-1, 1]: [samples] or [samples, channels]
    text: str | None = None  # a chat answer's text
    sample_rate: int | None = None
    timings: dict[str, float] = field(default_factory=dict)
    peak_memory_bytes: int | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class AudioChunk:
    """A delta of audio: never cumulative."""

    samples: np.ndarray  # float32 mono
    sample_rate: int


@dataclass(frozen=True)
class Voice:
    """A voice a speech pipeline offers."""

    id: str
    name: str = ""
    language: str | None = None
    description: str = ""
