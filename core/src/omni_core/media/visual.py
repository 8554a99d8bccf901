"""Image and video encoders: PNG through Pillow, MP4 (H.264) through PyAV (FFmpeg's libraries).

Both take what pipelines return (PIL images; ``uint8`` video ``[frames, height, width, 3]``,
with an optional sound track: a result's float ``audio`` ``[samples]`` or
``[samples, channels]`` at its ``sample_rate``, muxed as AAC) and write either to a path or to
bytes, so the CLI and the server share one implementation.

The same frames always give the same MP4 bytes (:func:`x264_options`): the AVX-512 kernels of
the x264 that PyAV's wheels bundle (core 165) read memory they never wrote in the lookahead's
macroblock-tree pass, so on an AVX-512 CPU the bytes (and the decoded pixels) of one video
depended on what the process had allocated before; x264 runs on its AVX2 kernels there.
"""

from __future__ import annotations

import functools
import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import InvalidRequestError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    from PIL import Image

VIDEO_FORMATS = ("mp4",)
IMAGE_FORMATS = ("png", "jpeg", "webp")


def encode_png(image: Image.Image) -> bytes:
    """PNG bytes of ``image``."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def encode_image(image: Image.Image, fmt: str = "png") -> bytes:
    """``image`` as PNG, JPEG or WebP bytes."""
    fmt = fmt.lower().replace("jpg", "jpeg")
    if fmt not in IMAGE_FORMATS:
        raise InvalidRequestError(
            f"unknown image format {fmt!r}; use one of {', '.join(IMAGE_FORMATS)}",
            param="output_format",
        )
    buffer = io.BytesIO()
    image.save(buffer, format=fmt.upper())
    return buffer.getvalue()


def video_to_images(video: np.ndarray) -> list[Image.Image]:
    """Frames of a ``uint8 [F, H, W, 3]`` video as PIL images."""
    from PIL import Image

    return [Image.fromarray(frame) for frame in _check_video(video)]


def x264_options(crf: int, preset: str) -> dict[str, str]:
    """libx264's options: ``crf`` and ``preset``, and on a CPU with AVX-512 the AVX2 kernels
    (see the module docstring: the AVX-512 ones made the same frames encode differently from
    one call to the next). Any CPU with AVX-512 has every instruction set ``asm=AVX2`` names."""
    options = {"crf": str(crf), "preset": preset}
    if _has_avx512():
        options["x264-params"] = "asm=AVX2"
    return options


@functools.cache
def _has_avx512() -> bool:
    """Whether x264 would pick its AVX-512 kernels here (F, CD, BW, DQ and VL, with OS support),
    as numpy's runtime CPU detection sees it."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # numpy 1
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as features
        except ImportError:  # pragma: no cover - no detection: x264 picks its own kernels
            return False
    return bool(features.get("AVX512_SKX")) and bool(features.get("AVX2"))


#: What a sound track is: float PCM (``[samples]`` or ``[samples, channels]``) and its rate.
AudioTrack = tuple["np.ndarray", int]
#: The samples of silence FFmpeg's AAC encoder puts first (its priming), which
#: :func:`decode_mp4_audio` drops so the decoded track lines up with the written one.
AAC_PRIMING = 1024
#: Rates FFmpeg's AAC encoder takes; a track at another rate is resampled to 48 kHz.
AAC_SAMPLE_RATES = (96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025)


def encode_mp4(
    video: np.ndarray,
    fps: int = 16,
    *,
    crf: int = 18,
    preset: str = "medium",
    audio: AudioTrack | None = None,
) -> bytes:
    """H.264 MP4 bytes of a ``uint8 [F, H, W, 3]`` video (yuv420p; odd sizes are padded), with
    ``audio`` (samples, rate) as an AAC track."""
    buffer = io.BytesIO()
    _write_mp4(buffer, video, fps, crf=crf, preset=preset, audio=audio)
    return buffer.getvalue()


def write_mp4(
    video: np.ndarray,
    path: str | os.PathLike[str],
    fps: int = 16,
    *,
    preset: str = "medium",
    audio: AudioTrack | None = None,
) -> Path:
    """Write ``video`` as an MP4 at ``path`` atomically (a ``.part`` file renamed once whole)."""
    target = Path(path)
    tmp = target.with_suffix(".part")
    with open(tmp, "wb") as handle:
        _write_mp4(handle, video, fps, preset=preset, audio=audio)
    tmp.replace(target)
    return target


def save_video(
    video: np.ndarray,
    path: str | os.PathLike[str],
    fps: int = 16,
    *,
    audio: AudioTrack | None = None,
) -> Path:
    """Write ``video`` to ``path``: MP4 by default (with ``audio`` as its sound track), a PNG
    per frame if ``path`` ends in ``/`` (the sound is then left out)."""
    target = Path(path)
    if str(path).endswith(os.sep) or target.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        for i, image in enumerate(video_to_images(video)):
            image.save(target / f"frame_{i:05d}.png")
        return target
    suffix = target.suffix.lower().lstrip(".")
    if suffix not in VIDEO_FORMATS:
        raise InvalidRequestError(
            f"cannot write video as {suffix or 'a file without extension'!r}; use .mp4",
            param="output",
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as handle:
        _write_mp4(handle, video, fps, audio=audio)
    return target


def save_image(image: Image.Image, path: str | os.PathLike[str]) -> Path:
    """Write ``image`` in the format its extension names (png, jpg, webp)."""
    target = Path(path)
    suffix = target.suffix.lower().lstrip(".") or "png"
    data = encode_image(image, suffix)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target


def decode_mp4(data: bytes | str | os.PathLike[str]) -> np.ndarray:
    """Frames of an MP4 as ``uint8 [F, H, W, 3]`` (for tests and round trips)."""
    import av
    import numpy as np

    source: Any = io.BytesIO(data) if isinstance(data, bytes) else str(data)
    with av.open(source) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    return np.stack(frames)


def decode_mp4_audio(data: bytes | str | os.PathLike[str]) -> tuple[np.ndarray, int] | None:
    """The sound track of an MP4 as float32 ``[samples, channels]`` and its rate, or None
    (for tests and round trips): AAC's priming dropped, so sample i is the written sample i
    (the tail is padded to whole codec frames)."""
    import av
    import numpy as np

    source: Any = io.BytesIO(data) if isinstance(data, bytes) else str(data)
    with av.open(source) as container:
        if not container.streams.audio:
            return None
        stream = container.streams.audio[0]
        rate, skip = int(stream.rate), AAC_PRIMING if stream.codec_context.name == "aac" else 0
        chunks = [f.to_ndarray() for f in container.decode(audio=0)]  # fltp: [channels, n]
    return np.concatenate(chunks, axis=1).T[skip:].astype(np.float32), rate


def _check_audio(audio: AudioTrack) -> tuple[np.ndarray, int]:
    """``[channels, samples]`` float32 in [-1, 1] at an AAC rate."""
    import numpy as np

    samples, rate = audio
    array = np.asarray(samples, dtype=np.float32)
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2 or array.shape[1] not in (1, 2) or not array.shape[0] or int(rate) < 1:
        raise ValueError(
            f"audio must be float [samples] or [samples, 1 | 2] at a positive rate, got "
            f"{array.shape} at {rate}"
        )
    array, rate = np.clip(array, -1.0, 1.0).T, int(rate)
    if rate not in AAC_SAMPLE_RATES:
        from omni_core.media.dsp import resample

        array = np.stack([resample(channel, rate, 48000) for channel in array])
        rate = 48000
    return np.ascontiguousarray(array, dtype=np.float32), rate


def _check_video(video: Any) -> np.ndarray:
    import numpy as np

    array = np.asarray(video)
    if array.ndim != 4 or array.shape[-1] != 3 or array.dtype != np.uint8:
        raise ValueError(
            f"video must be uint8 [frames, height, width, 3], got {array.dtype} {array.shape}"
        )
    return array


def _write_mp4(
    handle: Any,
    video: Any,
    fps: int,
    *,
    crf: int = 18,
    preset: str = "medium",
    audio: AudioTrack | None = None,
) -> None:
    import av
    import numpy as np

    array = _check_video(video)
    sound = None if audio is None else _check_audio(audio)
    _, height, width, _ = array.shape
    # yuv420p needs even sizes: pad by repeating the last row / column.
    pad_h, pad_w = height % 2, width % 2
    if pad_h or pad_w:
        array = np.pad(array, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), mode="edge")
    with av.open(handle, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=int(fps))
        stream.width = width + pad_w
        stream.height = height + pad_h
        stream.pix_fmt = "yuv420p"
        stream.options = x264_options(crf, preset)
        # Every stream exists before the first packet (the header is written then).
        track = None if sound is None else _audio_stream(container, sound[1], len(sound[0]))
        for frame in array:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
        if track is not None and sound is not None:
            samples, rate = sound
            layout = "mono" if samples.shape[0] == 1 else "stereo"
            frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout=layout)
            frame.sample_rate = rate
            for packet in track.encode(frame):  # the encoder cuts it into AAC frames
                container.mux(packet)
            for packet in track.encode():
                container.mux(packet)


def _audio_stream(container: Any, rate: int, channels: int) -> Any:
    """The container's AAC track."""
    return container.add_stream("aac", rate=rate, layout="mono" if channels == 1 else "stereo")


def request_image(value: Any, index: int) -> Any:
    """A request's ``images[index]`` as a PIL RGB image, from a PIL image, bytes or a file path;
    an InvalidRequestError naming that image (unreadable, empty, not an image) otherwise: what
    every image-conditioned pipeline checks before any compute."""
    from PIL import Image, UnidentifiedImageError

    param = f"images[{index}]" if index else "images"
    try:
        if isinstance(value, Image.Image):
            image = value
        elif isinstance(value, bytes | bytearray):
            image = Image.open(io.BytesIO(value))
        elif isinstance(value, str | Path):
            image = Image.open(Path(value))
        else:
            raise InvalidRequestError(
                f"images[{index}]: expected an image (PIL, bytes or a path), got "
                f"{type(value).__name__}",
                param=param,
            )
        image.load()
        if image.width < 1 or image.height < 1:
            raise InvalidRequestError(f"images[{index}] is empty", param=param)
        return image.convert("RGB")
    except InvalidRequestError:
        raise
    except (
        UnidentifiedImageError,
        OSError,
        ValueError,
        SyntaxError,  # PIL's "broken PNG file"
        EOFError,
        Image.DecompressionBombError,
    ) as exc:
        raise InvalidRequestError(
            f"images[{index}] could not be read as an image: {exc}", param=param
        ) from None
