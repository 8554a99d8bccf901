"""The speech base: request checks and streaming post-processing around a model's synthesis.

A speech pipeline produces float32 mono PCM at its model's native rate. Everything that is the
same for every model lives here, so plugins only write the model part:

- :class:`StreamingSpeechPipeline` validates the request (text, voice, sample rate) before any
  compute and turns the model's native chunks into delta :class:`AudioChunk` objects at the
  requested ``sample_rate`` and ``speed`` (:mod:`omni_core.audio.dsp`). All per-request state
  (resampler history, the tempo filter graph) lives in the generator of that request, so a
  pipeline object can be shared by threads without requests mixing.
- :func:`split_sentences` cuts text so that the first audio is ready after the first sentence.
- :func:`resolve_speech_model` maps a model reference (a checkpoint, a voice file, an alias) to
  the pipeline that claims it; :func:`default_speech_spec` is the pipeline that speaks when none
  is given (the one whose spec names a ``default_model``, registered by its plugin).
"""

from __future__ import annotations

import os
import re
import threading
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from omni_core.audio.codecs import check_sample_rate
from omni_core.audio.dsp import SpeechPostprocessor
from omni_core.errors import InvalidRequestError
from omni_core.pipelines.base import AudioChunk, GenerationRequest, SpeechPipeline, Voice

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from omni_core.registry import PipelineSpec, Registry

#: Longest text one request may speak (characters). OpenAI's speech endpoint uses the same bound.
MAX_TEXT_CHARS = 4096

_SENTENCE_END = re.compile("(?<=[.!?;:\u3002\uff01\uff1f])\\s+|\n+")


# --------------------------------------------------------------------------------- text
def check_text(text: str, *, max_chars: int = MAX_TEXT_CHARS) -> str:
    """The text to speak, stripped; empty or too long is an InvalidRequestError on ``input``."""
    stripped = (text or "").strip()
    if not stripped:
        raise InvalidRequestError("input: the text to speak is empty", param="input")
    if len(stripped) > max_chars:
        raise InvalidRequestError(
            f"input: the text is {len(stripped)} characters; the limit is {max_chars}",
            param="input",
        )
    return stripped


def check_voice(voice: str | None, voices: Sequence[Voice]) -> str | None:
    """``voice`` if the pipeline offers it; ``None`` means the pipeline's default."""
    if voice is None or voice == "":
        return None
    ids = [v.id for v in voices]
    if voice not in ids:
        offered = ", ".join(ids) if ids else "none (this model has a single voice)"
        raise InvalidRequestError(
            f"voice: unknown voice {voice!r}; available: {offered}", param="voice"
        )
    return voice


def split_sentences(text: str, max_chars: int = 400) -> list[str]:
    """Split text at sentence ends (and hard-wrap very long sentences at spaces).

    Speech pipelines synthesise one segment at a time so that the first audio is ready after the
    first sentence instead of after the whole text.
    """
    pieces = [p.strip() for p in _SENTENCE_END.split(text) if p and p.strip()]
    out: list[str] = []
    for piece in pieces:
        while len(piece) > max_chars:
            cut = piece.rfind(" ", 0, max_chars)
            cut = cut if cut > 0 else max_chars
            out.append(piece[:cut].strip())
            piece = piece[cut:].strip()
        if piece:
            out.append(piece)
    return out


# --------------------------------------------------------------------------------- pipelines
class StreamingSpeechPipeline(SpeechPipeline):
    """Base of speech pipelines: request checks + streaming post-processing around the model.

    Subclasses set :attr:`sample_rate` (native) and implement :meth:`synthesize`, a generator of
    float32 chunks at the native rate. ``synthesize`` receives a request whose ``prompt`` is the
    stripped text and whose ``voice`` is a valid id or ``None`` (the default voice). Model calls
    that touch process-global state (torch's RNG, module attributes) must hold :attr:`lock`.
    """

    #: Native output rate of the model, set by ``from_pretrained``.
    sample_rate: int = 16000
    #: True when :meth:`synthesize` applies ``request.speed`` itself (pitch-preserving).
    native_speed: ClassVar[bool] = False
    max_text_chars: ClassVar[int] = MAX_TEXT_CHARS

    def __init__(self) -> None:
        #: Serialises model calls that use process-global state (seeded RNG, module attributes).
        self.lock = threading.RLock()

    @classmethod
    def precheck(cls, path: Path, request: GenerationRequest) -> GenerationRequest:
        """Text, sample rate and extras, checked before any weights load."""
        request = super().precheck(path, request)
        check_text(request.prompt, max_chars=cls.max_text_chars)
        check_sample_rate(request.sample_rate)
        return request

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        request = super().validate(request)
        text = check_text(request.prompt, max_chars=self.max_text_chars)
        voice = check_voice(request.voice, self.voices())
        check_sample_rate(request.sample_rate)
        if request.reference is not None and not self.clones_voices:
            raise InvalidRequestError(
                f"ref_audio: {type(self).__name__} cannot clone voices", param="ref_audio"
            )
        return request.model_copy(update={"prompt": text, "voice": voice})

    @abstractmethod
    def synthesize(self, request: GenerationRequest) -> Iterator[np.ndarray]:
        """Yield float32 mono chunks at :attr:`sample_rate` as soon as each is ready."""

    def stream(self, request: GenerationRequest) -> Iterator[AudioChunk]:
        """Validate, then yield delta chunks at the requested rate and speed."""
        request = self.validate(request)
        return self._stream(request)

    def _stream(self, request: GenerationRequest) -> Iterator[AudioChunk]:
        speed = 1.0 if self.native_speed else request.speed
        post = SpeechPostprocessor(self.sample_rate, sample_rate=request.sample_rate, speed=speed)
        for native in self.synthesize(request):
            out = post.process(native)
            if out.size:
                yield AudioChunk(samples=out, sample_rate=post.sample_rate)
        tail = post.flush()
        if tail.size:
            yield AudioChunk(samples=tail, sample_rate=post.sample_rate)


# --------------------------------------------------------------------------------- model lookup
def default_speech_spec(registry: Registry | None = None) -> PipelineSpec | None:
    """The speech pipeline that speaks when no model is given: the first (by name) whose spec
    names a ``default_model``; None when no installed plugin offers one."""
    if registry is None:
        from omni_core.plugins import get_registry

        registry = get_registry()
    speech = (s for s in registry.pipelines.values() if s.modality == "speech")
    return next((s for s in sorted(speech, key=lambda s: s.name) if s.default_model), None)


def resolve_speech_model(
    model: str | os.PathLike[str] | None, registry: Registry | None = None
) -> tuple[str, dict[str, Any]]:
    """Map a speech model reference to ``(model, Omni keyword arguments)``.

    Checkpoints with a ``config.json`` go through the normal architecture lookup. Speech
    pipelines may also claim references that have none (a voice folder, a voice file, an alias)
    through the classmethod :meth:`~omni_core.pipelines.base.Pipeline.resolve_model`; then the
    pipeline is chosen explicitly. ``None`` means the ``default_model`` of
    :func:`default_speech_spec`.
    """
    from omni_core.errors import ModelNotFoundError

    if registry is None:
        from omni_core.plugins import get_registry

        registry = get_registry()
    speech = [s for s in registry.pipelines.values() if s.modality == "speech"]
    defaults = {s.default_model for s in speech if s.default_model}
    if model is None:
        default = default_speech_spec(registry)
        if default is None or not default.default_model:
            raise ModelNotFoundError(
                "no default speech model: no installed speech pipeline offers one (omni-tts "
                "does, with its default-voice extra); pass --model"
            )
        ref = default.default_model
    else:
        ref = str(model)
    path = Path(ref).expanduser()
    has_config = path.is_dir() and (
        (path / "model_index.json").exists() or (path / "config.json").exists()
    )
    for spec in sorted(speech, key=lambda s: s.name):
        claimed = spec.load().resolve_model(ref)
        if claimed is not None:
            folder, voice = claimed
            kwargs: dict[str, Any] = {"pipeline": spec.name}
            if voice:
                kwargs["default_voice"] = voice
            return str(folder), kwargs
    if model is None or (ref in defaults and not has_config):
        raise ModelNotFoundError(f"speech model {ref!r} is not installed")
    return ref, {}
