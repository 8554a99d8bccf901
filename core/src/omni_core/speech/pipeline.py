"""The speech base: request checks and streaming post-processing around a model's synthesis.

A speech pipeline produces float32 mono PCM at its model's native rate. Everything that is the
same for every model lives here, so plugins only write the model part:

- :class:`StreamingSpeechPipeline` validates the request (text, voice, sample rate) before any
  compute and turns the model's native chunks into delta :class:`AudioChunk` objects at the
  requested ``sample_rate`` and ``speed`` (:mod:`omni_core.media.dsp`). All per-request state
  (resampler history, the tempo filter graph) lives in the generator of that request, so a
  pipeline object can be shared by threads without requests mixing.
- :func:`split_sentences` cuts text so that the first audio is ready after the first sentence.

:class:`SpeechPipeline` is the lane's streamed-pipeline base (``stream`` yields audio deltas;
the engine and ``Omni`` gather them with a :class:`~omni_core.contract.collect.SpeechCollector`).
"""

from __future__ import annotations

import re
import threading
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from omni_core.contract.collect import SpeechCollector
from omni_core.contract.errors import InvalidRequestError
from omni_core.contract.pipeline import StreamedPipeline
from omni_core.contract.types import (
    AudioChunk,
    GenerationRequest,
    PreparedVoice,
    ReferenceVoice,
    Voice,
)
from omni_core.media.audio import check_sample_rate
from omni_core.media.dsp import SpeechPostprocessor

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

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


def check_speakable(text: str, speakable: str | None) -> None:
    """A text without any character of the voice's class (:meth:`SpeechPipeline.speakable`)
    is an InvalidRequestError on ``input``: the voice would say nothing."""
    if speakable is not None and not re.search(speakable, text):
        raise InvalidRequestError(
            f"input: this voice says nothing for this text: it speaks only {speakable} "
            "(other characters are dropped)",
            param="input",
        )


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


def check_speakers(
    speakers: Mapping[str, str | ReferenceVoice],
    voices: Sequence[Voice],
    *,
    max_speakers: int,
    clones: bool,
) -> None:
    """A multi-speaker request's voices: at most ``max_speakers``, each a voice of the model
    or (for a model that clones) a voice to clone; any problem is a 400 naming ``speakers``."""
    if not speakers:
        return
    if max_speakers < 2:
        raise InvalidRequestError(
            "speakers: this model speaks one voice per request (give voice instead)",
            param="speakers",
        )
    if len(speakers) > max_speakers:
        raise InvalidRequestError(
            f"speakers: {len(speakers)} voices; this model speaks at most {max_speakers}",
            param="speakers",
        )
    ids = {v.id for v in voices}
    for label, voice in speakers.items():
        if isinstance(voice, str) and voice not in ids:
            offered = ", ".join(sorted(ids)) or "none"
            raise InvalidRequestError(
                f"speakers: {label!r}: unknown voice {voice!r}; available: {offered} "
                "(or an uploaded voice)",
                param="speakers",
            )
        if isinstance(voice, ReferenceVoice) and not clones:
            raise InvalidRequestError(
                f"speakers: {label!r}: this model cannot clone voices", param="speakers"
            )


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
class SpeechPipeline(StreamedPipeline[AudioChunk]):
    """A speech pipeline: yields delta audio chunks as it generates them."""

    @abstractmethod
    def stream(self, request: GenerationRequest) -> Iterator[AudioChunk]:
        """Yield audio chunks; their concatenation is the non-streamed result."""

    def open_stream(self, request: GenerationRequest) -> Iterator[AudioChunk]:
        return self.stream(request)

    def collector(self, started: float | None = None) -> SpeechCollector:
        return SpeechCollector(started)

    def voices(self) -> list[Voice]:
        """The voices this loaded model offers (``GET /v1/audio/voices``)."""
        return []

    @classmethod
    def known_voices(cls) -> list[Voice] | None:
        """Voices known without loading weights (``omni voices``); None: only a loaded model can
        tell."""
        return None

    def warmup_fields(self) -> dict[str, Any]:
        """Keywords of the smallest request that runs this model end to end (the server's
        warm-up): shared fields by name, the rest extras. Models that need more than a text
        (a voice description, a reference voice) or would speak long (random test weights)
        say so here."""
        return {"prompt": "Hello."}

    #: True when :meth:`prepare_voice` works and requests may carry a ``reference`` voice.
    clones_voices: ClassVar[bool] = False
    #: Speakers one request may give voices to (``GenerationRequest.speakers``, the body's
    #: ``speakers``): above 1 for a model that speaks a multi-speaker script in one request.
    max_speakers: ClassVar[int] = 1
    #: A multi-speaker model's script label: a regular expression (matched case-insensitively
    #: at the start of a line, after spaces) for the label that opens a line of its script
    #: (VibeVoice's matches "Speaker 1:"). The WebSocket text stream speaks a
    #: script a sentence at a time and opens each sentence without one with the label in
    #: effect, so that it is spoken by the same speaker as over HTTP. None: no labels.
    script_label: ClassVar[str | None] = None

    def speakers_in(
        self, text: str, speakers: Mapping[str, str | ReferenceVoice]
    ) -> dict[str, str | ReferenceVoice]:
        """The entries of ``speakers`` whose speakers have lines in ``text``, a piece of a longer
        script (a sentence of the WebSocket text stream, which names its speakers once for the
        whole session); a key that names no speaker of this model is an InvalidRequestError on
        ``speakers``. Default: all of them (a model without script labels)."""
        return dict(speakers)

    def speakable(self) -> str | None:
        """The characters this voice says, as a regular-expression character class (``"[a-z]"``),
        when it says nothing for a text without any of them (a tokenizer that drops every other
        character); None: any non-blank text is spoken. :class:`StreamingSpeechPipeline` refuses
        a text without one before any compute (a 400 naming ``input``, not "no audio" after
        the run), and the server publishes the class in its OpenAPI document."""
        return None

    def prepare_voice(self, voice: ReferenceVoice) -> PreparedVoice:
        """Prepare a reference voice once (``POST /v1/audio/voices``): speaker embedding, prompt
        codes, ... Requests then carry it as ``ReferenceVoice(prepared=...)``. The default
        refuses: this model cannot clone voices."""
        raise InvalidRequestError(
            f"{type(self).__name__} cannot clone voices from reference audio", param="audio"
        )


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
        check_speakable(text, self.speakable())
        voice = check_voice(request.voice, self.voices())
        check_sample_rate(request.sample_rate)
        if request.reference is not None and not self.clones_voices:
            raise InvalidRequestError(
                f"ref_audio: {type(self).__name__} cannot clone voices", param="ref_audio"
            )
        check_speakers(
            request.speakers,
            self.voices(),
            max_speakers=self.max_speakers,
            clones=self.clones_voices,
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
