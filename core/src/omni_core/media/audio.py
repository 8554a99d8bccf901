"""Audio codecs: output formats, whole-file and streamed encoders, decoding, atomic writes.

- Formats: ``wav`` (16-bit PCM, stdlib ``wave``), ``pcm`` (raw s16le), ``flac`` and ``mp3``
  through PyAV (BSD; its FFmpeg is an LGPL build with LAME). :func:`check_format` and
  :func:`check_sample_rate` say which formats and rates a request may ask for.
- :func:`encode_audio` encodes a whole signal; :class:`StreamEncoder` encodes chunk by chunk for
  streamed HTTP bodies (a streamed WAV starts with a header that says "unknown length").
- :func:`decode_audio` reads any of them back (tests, round trips); :func:`duration_s`.
- :func:`write_audio` / :func:`write_bytes_atomic` write atomically (temp file + rename).

No dependency beyond omni-core's runtime extra (numpy, av), both imported inside the functions.
"""

from __future__ import annotations

import io
import math
import os
import struct
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import InvalidRequestError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

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


# --------------------------------------------------------------------------------- validation
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


# --------------------------------------------------------------------------------- whole files
def to_int16(samples: np.ndarray) -> np.ndarray:
    """Float PCM in [-1, 1] to int16 (clipped)."""
    import numpy as np

    x = np.clip(np.asarray(samples, dtype=np.float32).reshape(-1), -1.0, 1.0)
    return np.round(x * 32767.0).astype("<i2")


def encode_audio(samples: np.ndarray, sample_rate: int, fmt: str = "wav") -> bytes:
    """Encode a whole float signal as ``fmt`` bytes (16-bit for wav, pcm and flac): mono
    ``[samples]``, or ``[samples, channels]`` (stereo music; pcm interleaves the channels)."""
    fmt = check_format(fmt, sample_rate)
    channels = _channels(samples)
    if fmt == "pcm":
        return to_int16(samples).tobytes()
    if fmt == "wav":
        import wave

        buffer = io.BytesIO()
        with wave.open(buffer, "wb") as handle:
            handle.setnchannels(channels)
            handle.setsampwidth(2)
            handle.setframerate(int(sample_rate))
            handle.writeframes(to_int16(samples).tobytes())
        return buffer.getvalue()
    # flac / mp3 through FFmpeg (PyAV) into a seekable buffer, so headers get their totals.
    buffer = io.BytesIO()
    encoder = StreamEncoder(fmt, sample_rate, channels=channels, _sink=buffer)
    encoder.encode(samples)
    encoder.close()
    return buffer.getvalue()


def _channels(samples: Any) -> int:
    """1 for ``[samples]``, else the channels of ``[samples, channels]`` (1 or 2)."""
    shape = getattr(samples, "shape", (len(samples),))
    if len(shape) == 1:
        return 1
    if len(shape) != 2 or shape[1] not in (1, 2):
        raise ValueError(f"audio must be [samples] or [samples, 1 or 2 channels], not {shape}")
    return int(shape[1])


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
            channels = len(frame.layout.channels)
            # planar: one row per channel; packed: the channels interleaved in one row
            rows = (
                array.reshape(channels, -1)
                if frame.format.is_planar
                else array.reshape(-1, channels).T
            )
            parts.append(rows.mean(axis=0))
    audio = np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)
    return audio, int(rate)


def duration_s(samples: Any, sample_rate: int) -> float:
    """Seconds of audio in ``samples``."""
    return len(samples) / float(sample_rate) if sample_rate else math.nan


# --------------------------------------------------------------------------------- files
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


# --------------------------------------------------------------------------------- streams
class StreamEncoder:
    """Incremental encoder for streamed responses: ``encode(chunk)`` then ``close()``.

    ``pcm`` is raw s16le; ``wav`` starts with a header whose sizes say "unknown length"
    (0xFFFFFFFF, as streaming servers do); ``mp3`` (LAME) and ``flac`` go through PyAV.
    """

    def __init__(
        self, fmt: str, sample_rate: int, *, channels: int = 1, _sink: io.BytesIO | None = None
    ) -> None:
        self.fmt = check_format(fmt, sample_rate)
        self.sample_rate = int(sample_rate)
        self.channels = channels
        self._layout = "stereo" if channels == 2 else "mono"
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
            self._stream = self._container.add_stream(
                codec, rate=self.sample_rate, layout=self._layout
            )
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
        ch, layout = self.channels, self._layout
        if self._stream.codec_context.format.name == "s16":  # packed: channels interleaved
            x = to_int16(samples).reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(x, format="s16", layout=layout)
        else:  # planar: one row per channel
            x = np.ascontiguousarray(_as_float(samples).reshape(-1, ch).T)
            frame = av.AudioFrame.from_ndarray(x, format="fltp", layout=layout)
        frames = x.size // ch
        if frames == 0:
            return b""
        frame.sample_rate = self.sample_rate
        frame.pts = self._pts
        self._pts += frames
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
