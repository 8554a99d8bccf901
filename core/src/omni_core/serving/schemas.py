"""Request bodies of the OpenAI-compatible endpoints.

Unknown fields are allowed at this layer on purpose: they are the pipeline's extras and are
validated by its own extras model (``pipeline.extras_model``), so a typo still gets a 400 that
names the field. Limits here are the server's; the pipeline adds its own (sizes, frame counts).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

#: Longest URL field (a data URL holds a whole image): the body limit bounds it; the image's
#: bytes are held to ``--max-upload-mb`` with a message naming that limit.
URL_MAX_CHARS = 64 * 1024 * 1024

_SIZE = re.compile(r"^(\d{1,5})x(\d{1,5})$")
#: A language name or code (``English``, ``en``, ``zh-CN``, ``Auto``).
LANGUAGE_PATTERN = r"^[A-Za-z][A-Za-z_-]{0,63}$"


def parse_size(size: str | None, param: str = "size") -> tuple[int | None, int | None]:
    """``"WxH"`` -> (width, height); ``None`` or ``"auto"`` -> the pipeline's default."""
    from omni_core.serving.errors import invalid

    if size is None or size == "auto":
        return None, None
    match = _SIZE.match(size.strip().lower())
    if not match:
        raise invalid(f"{param}: expected 'WIDTHxHEIGHT' (e.g. '1024x1024'), got {size!r}", param)
    width, height = int(match.group(1)), int(match.group(2))
    if not (0 < width <= 8192 and 0 < height <= 8192):
        raise invalid(f"{param}: width and height must be between 1 and 8192", param)
    return width, height


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow", str_max_length=100_000)

    model: str | None = Field(None, description="Model id (/v1/models); optional with one model.")

    def extras(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class _DiffusionFields(_Body):
    prompt: str = Field(min_length=1, max_length=32_000)
    negative_prompt: str | None = Field(None, max_length=32_000)
    size: str | None = Field(
        None,
        description='"WIDTHxHEIGHT" or "auto".',
        max_length=16,
        pattern=r"^(\d{1,5}x\d{1,5}|auto)$",
    )
    seed: int | None = Field(None, ge=0, lt=2**63)
    num_inference_steps: int | None = Field(None, ge=1, le=1000)
    guidance_scale: float | None = Field(None, ge=0.0, le=100.0)
    lora: list[dict[str, Any] | str] | dict[str, Any] | str | None = Field(
        None,
        description="LoRA adapters loaded with --lora, by name: [{'name', 'scale'}] (or one).",
    )

    @field_validator("prompt")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the prompt is empty")
        return value


class ImageGenerationBody(_DiffusionFields):
    """POST /v1/images/generations."""

    n: int = Field(1, ge=1, le=10)
    response_format: Literal["b64_json", "url", "file"] = Field(
        "b64_json",
        description='"b64_json", "url", or vLLM-Omni\'s "file": the image bytes themselves '
        "(a zip of image_<i>.<ext> when n > 1).",
    )
    output_format: Literal["png", "jpeg", "webp"] = Field(
        "png", description='"png", "jpeg" (or "jpg") or "webp".'
    )

    @field_validator("output_format", mode="before")
    @classmethod
    def _jpg(cls, value: Any) -> Any:
        return "jpeg" if isinstance(value, str) and value.lower() in ("jpg", "jpeg") else value


class ImageEditBody(ImageGenerationBody):
    """POST /v1/images/edits (multipart; the images come as ``image`` file parts)."""


class VideoBody(_DiffusionFields):
    """POST /v1/videos (JSON, or multipart with an ``input_reference`` image)."""

    seconds: str | None = Field(
        None, max_length=8, description="Clip length; becomes num_frames = seconds * fps + 1."
    )
    num_frames: int | None = Field(None, ge=1, le=1024)
    input_reference: (
        Annotated[str, StringConstraints(max_length=URL_MAX_CHARS)] | dict[str, Any] | None
    ) = Field(None, description="JSON only: an image URL / data URL, or {'image_url': ...}.")

    @field_validator("seconds", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        return value


class SpeechBody(_Body):
    """POST /v1/audio/speech."""

    input: str = Field(min_length=1, max_length=4096)
    voice: str | dict[str, Any] | None = None
    response_format: Literal["wav", "pcm", "flac", "mp3"] | None = Field(
        None,
        description="Unset: the server's --speech-format (wav by default, vLLM-Omni's default; "
        "OpenAI's is mp3).",
    )
    speed: float = Field(1.0, ge=0.25, le=4.0)
    stream: bool = False
    stream_format: Literal["sse", "audio"] | None = None
    seed: int | None = Field(None, ge=0, lt=2**63)
    temperature: float | None = Field(
        None,
        ge=0.0,
        le=2.0,
        description="Autoregressive voices sample with it (0: greedy); others ignore it.",
    )
    top_p: float | None = Field(
        None, gt=0.0, le=1.0, description="Autoregressive voices: nucleus sampling."
    )
    top_k: int | None = Field(
        None, ge=0, le=100_000, description="Autoregressive voices: top-k sampling (0: all)."
    )
    sample_rate: int | None = Field(
        None, ge=8000, le=192000, description="Resample the output to this rate (Hz)."
    )
    language: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=LANGUAGE_PATTERN,
        description="A language name (vLLM-Omni's 'English', 'Chinese', ...), a code ('en', "
        "'zh-CN') or 'Auto'; honoured when the voice speaks it.",
    )

    @field_validator("input")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the input text is empty")
        return value

    def voice_id(self) -> str | None:
        if isinstance(self.voice, dict):
            value = self.voice.get("id")
            return str(value) if value is not None else None
        return self.voice

    def sampling(self) -> dict[str, Any]:
        """The shared sampling fields given (compat drops them for voices that sample none;
        the request schema checks their ranges)."""
        given = {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k}
        return {k: v for k, v in given.items() if v is not None}


class ChatBody(_Body):
    """POST /v1/chat/completions for image models (the prompt and images come in
    ``messages``); generation knobs top level or in ``extra_body`` (merged by compat)."""

    messages: list[dict[str, Any]] = Field(min_length=1, max_length=64)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    n: int = Field(1, ge=1, le=10, description="Choices, each with its own image.")
    num_outputs_per_prompt: int = Field(1, ge=1, le=10, description="vLLM-Omni: images per choice.")
    modalities: list[str] | None = Field(
        None, description='Output modalities; ["image"] is served (text/audio later).'
    )
    negative_prompt: str | None = Field(None, max_length=32_000)
    size: str | None = Field(
        None, max_length=16, pattern=r"^(\d{1,5}x\d{1,5}|auto)$", description='"WxH" or "auto".'
    )
    seed: int | None = Field(None, ge=0, lt=2**63)
    num_inference_steps: int | None = Field(None, ge=1, le=1000)
    guidance_scale: float | None = Field(None, ge=0.0, le=100.0)
    lora: list[dict[str, Any] | str] | dict[str, Any] | str | None = Field(
        None,
        description="LoRA adapters loaded with --lora, by name: [{'name', 'scale'}] (or one).",
    )
    width: list[int] | None = Field(
        None, description="vLLM-Omni's per-output sizes: one image per (width, height) entry."
    )
    height: list[int] | None = Field(None, description="The heights of ``width``'s entries.")

    @model_validator(mode="after")
    def _per_output_sizes(self) -> ChatBody:
        """N per-output sizes are N images per choice (compat checked that a
        ``num_outputs_per_prompt`` given too says N)."""
        if self.width is not None:
            self.num_outputs_per_prompt = len(self.width)
        return self

    def sizes(self) -> list[str | None]:
        """The size of each image of a choice (``[None]``: the ``size`` field's, one or more)."""
        if self.width is None or self.height is None:
            return [None]
        return [f"{w}x{h}" for w, h in zip(self.width, self.height, strict=True)]


class ChatAudio(BaseModel):
    """The ``audio`` object of a chat request: the answer's voice and file format."""

    model_config = ConfigDict(extra="forbid")

    voice: str | dict[str, Any] | None = Field(
        None, description="A voice of the model (GET /v1/audio/voices); default: its first."
    )
    format: Literal["wav", "mp3", "flac", "pcm16"] | None = Field(
        None, description='Default "wav" (whole answers) or "pcm16" (streamed deltas).'
    )

    def voice_id(self) -> str | None:
        voice = self.voice.get("id") if isinstance(self.voice, dict) else self.voice
        return str(voice) if voice else None


class ChatAnswerBody(_Body):
    """POST /v1/chat/completions for chat models (text, and speech for omni models).

    ``max_completion_tokens`` (OpenAI's newer name) arrives here as ``max_tokens`` (compat)."""

    messages: list[dict[str, Any]] = Field(min_length=1, max_length=256)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    modalities: list[Literal["text", "audio"]] = Field(
        ["text"], min_length=1, max_length=2, description='["text"] or ["text", "audio"].'
    )
    audio: ChatAudio | None = None
    max_tokens: int | None = Field(None, ge=1, le=32768)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1, le=100000, description="0 or -1: every token.")
    seed: int | None = Field(None, ge=0, lt=2**63)

    @field_validator("stream", mode="before")
    @classmethod
    def _no_null(cls, value: Any) -> Any:
        return False if value is None else value


#: The longest clip ``/v1/audio/generate`` makes, whatever the model says (seconds).
MAX_AUDIO_S = 600.0


class AudioGenerationBody(BaseModel):
    """POST /v1/audio/generate (unknown fields are the pipeline's extras)."""

    model_config = ConfigDict(extra="allow", str_max_length=100_000)

    model: str | None = Field(None, description="Model id (/v1/models); optional with one model.")
    input: str = Field(min_length=1, max_length=32_000, description="What to hear.")
    negative_prompt: str | None = Field(None, max_length=32_000)
    audio_length: float | None = Field(
        None, gt=0.0, le=MAX_AUDIO_S, description="Seconds of audio (the model's default if unset)."
    )
    audio_start: float | None = Field(None, ge=0.0, le=MAX_AUDIO_S, description="Start, seconds.")
    audio_end_in_s: float | None = Field(
        None, gt=0.0, le=MAX_AUDIO_S, description="diffusers' end: audio_start + audio_length."
    )
    num_inference_steps: int | None = Field(None, ge=1, le=1000)
    guidance_scale: float | None = Field(None, ge=0.0, le=100.0)
    seed: int | None = Field(None, ge=0, lt=2**63)
    response_format: str = Field("wav", description="wav, pcm (s16le), flac or mp3.")
    speed: float = Field(1.0, description="vLLM-Omni's; only 1 (generated audio is not sped up).")
    stream_format: str | None = Field(None, description='"audio" (the file) or unset.')
    lora: list[dict[str, Any] | str] | dict[str, Any] | str | None = None

    def extras(self) -> dict[str, Any]:
        return dict(self.model_extra or {})
