"""Encoders and decoders at the HTTP edge: images in and out, MP4, audio formats, safe URL fetch."""

from __future__ import annotations

import base64
import binascii
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from omni_core.serving.errors import APIError, invalid

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    from PIL import Image

#: Largest decoded image accepted (pixels): guards against decompression bombs.
MAX_IMAGE_PIXELS = 64 * 1024 * 1024

AUDIO_MEDIA_TYPES = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
}

IMAGE_FORMATS = {
    "png": ("PNG", "image/png"),
    "jpeg": ("JPEG", "image/jpeg"),
    "webp": ("WEBP", "image/webp"),
}


#: The image formats inputs may use (what the error messages promise); Pillow opens no other.
INPUT_FORMATS = ("PNG", "JPEG", "WEBP")
#: Seconds an allowed-host URL fetch may take in all (connect, headers and body) unless the
#: caller says (``ServerConfig.url_fetch_timeout_s``): a server sending a byte a second cannot
#: hold a request for longer.
FETCH_DEADLINE_S = 20.0


def image_header(data: Any, param: str) -> tuple[int, int]:
    """``(width, height)`` of an image (bytes or a file) from its header alone (Pillow's lazy
    open: nothing is decoded); anything but png, jpeg or webp is a 400 naming ``param``."""
    return image_info(data, param)[1:]


def image_info(data: Any, param: str) -> tuple[str, int, int]:
    """``(format, width, height)`` of an image from its header alone (see :func:`image_header`)."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(data, bytes | bytearray):
        data = io.BytesIO(data)
    try:
        with Image.open(data, formats=INPUT_FORMATS) as img:
            return str(img.format), *img.size
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        raise unreadable(param) from None


def unreadable(param: str) -> APIError:
    """The 400 of an input that is not a png, jpeg or webp image Pillow can read."""
    return invalid(
        f"{param}: the file is not a readable image (png, jpeg or webp)",
        param,
        code="invalid_image",
    )


#: A JPEG decodes at 1/2, 1/4 or 1/8 of its size for a fraction of the work (libjpeg's DCT
#: scaling, Pillow's ``draft``); no other input format can.
JPEG_REDUCTIONS = (1, 2, 4, 8)


def _reduced(width: int, height: int, by: int) -> int:
    return -(-width // by) * -(-height // by)


def fit_pixels(images: list[tuple[str, str, int, int]], max_pixels: int) -> list[int]:
    """How each ``(param, format, width, height)`` image of one request decodes within
    ``max_pixels`` decoded pixels in all, decided from the headers before anything is decoded:
    the reduction of each (1: full size). JPEGs over the budget decode reduced (the largest
    first); a request that still does not fit is a 413 naming the image and the flag."""
    reductions = [1] * len(images)

    def total() -> int:
        return sum(_reduced(w, h, r) for (_, _, w, h), r in zip(images, reductions, strict=True))

    while total() > max_pixels:
        shrinkable = [
            i
            for i, (_, fmt, _, _) in enumerate(images)
            if fmt == "JPEG" and reductions[i] < JPEG_REDUCTIONS[-1]
        ]
        if not shrinkable:
            running, param = 0, images[-1][0]
            for (name, _, w, h), r in zip(images, reductions, strict=True):
                running += _reduced(w, h, r)
                if running > max_pixels:
                    param = name
                    break
            raise APIError(
                413,
                f"{param}: the input images decode to {total()} pixels, above this server's "
                f"limit of {max_pixels} (--max-upload-pixels); send smaller images",
                param=param,
                code="image_too_large",
            )
        largest = max(shrinkable, key=lambda i: _reduced(*images[i][2:], reductions[i]))
        reductions[largest] *= 2
    return reductions


def check_pixels(blobs: list[tuple[str, bytes]], max_pixels: int) -> list[int]:
    """:func:`fit_pixels` of the ``(param, bytes)`` images of one request (their headers)."""
    infos = [(param, *image_info(data, param)) for param, data in blobs if data]
    reductions = iter(fit_pixels(infos, max_pixels))
    return [next(reductions) if data else 1 for _, data in blobs]


def decode_images(blobs: list[tuple[str, bytes]], max_pixels: int) -> list[Image.Image]:
    """Every ``(param, bytes)`` image of a request -> RGB images within the pixel budget,
    decided from the headers first (:func:`check_pixels`): uploads, URLs and data URLs alike."""
    reductions = check_pixels(blobs, max_pixels)
    pairs = zip(blobs, reductions, strict=True)
    return [decode_image(data, param, reduce=r) for (param, data), r in pairs]


def decode_image(data: bytes, param: str = "image", *, reduce: int = 1) -> Image.Image:
    """Bytes of an uploaded image -> RGB PIL image, or a 400 naming ``param``; ``reduce``
    (a JPEG only): decoded at that fraction of its size (:data:`JPEG_REDUCTIONS`)."""
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise invalid(f"{param}: the uploaded file is empty", param, code="invalid_image")
    try:
        with Image.open(io.BytesIO(data), formats=INPUT_FORMATS) as img:
            width, height = img.size
            if reduce > 1 and img.format == "JPEG":
                img.draft("RGB", (-(-width // reduce), -(-height // reduce)))
                width, height = img.size
            if width * height > MAX_IMAGE_PIXELS:
                raise invalid(
                    f"{param}: image of {width}x{height} pixels is too large",
                    param,
                    code="image_too_large",
                )
            img.load()
            return img.convert("RGB")
    except APIError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        raise unreadable(param) from None


def encode_image(image: Image.Image, fmt: str = "png") -> bytes:
    pil_format, _ = IMAGE_FORMATS[fmt]
    buf = io.BytesIO()
    image.save(buf, format=pil_format)
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def encode_mp4(
    frames: np.ndarray, fps: int, path: Path, audio: tuple[np.ndarray, int] | None = None
) -> None:
    """Frames [T, H, W, 3] (uint8, or floats in [0, 1]) -> H.264 MP4 at ``path``, atomically
    (odd sizes are padded to even), with ``audio`` (samples, rate) as its AAC track; the same
    frames always give the same bytes (:func:`omni_core.media.visual.x264_options`)."""
    import numpy as np

    from omni_core.media.visual import write_mp4

    frames = np.asarray(frames)
    if frames.dtype != np.uint8:
        frames = (np.clip(frames, 0.0, 1.0) * 255).round().astype(np.uint8)
    write_mp4(frames, path, int(fps or 16), preset="veryfast", audio=audio)


def encode_audio(samples: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """Mono float32 audio -> wav | pcm (s16le) | flac | mp3 bytes (omni_core.media encoders).

    mp3 exists only at some rates: other rates are resampled to 24 kHz for mp3.
    """
    from omni_core.media import audio as codecs
    from omni_core.media import dsp

    if fmt == "mp3" and sample_rate not in codecs.MP3_SAMPLE_RATES:
        samples, sample_rate = dsp.resample(samples, sample_rate, 24000), 24000
    return codecs.encode_audio(samples, sample_rate, fmt)


def stream_encoder(fmt: str, sample_rate: int) -> tuple[Any, int]:
    """An incremental encoder for a streamed response, and the rate it encodes at."""
    from omni_core.media import audio as codecs

    return codecs.StreamEncoder(fmt, sample_rate), sample_rate


def _too_big(param: str, size: int | str, max_bytes: int) -> APIError:
    return APIError(
        413,
        f"{param}: the file is {size} bytes, above this server's limit of "
        f"{max_bytes / (1024 * 1024):g} MB per file (--max-upload-mb); send a smaller file",
        param=param,
        code="file_too_large",
    )


def parse_data_url(value: str, param: str, max_bytes: int | None = None) -> bytes:
    """``data:image/...;base64,...`` -> its bytes; with ``max_bytes``, the size is checked
    from the length of the text before anything is decoded."""
    header, _, payload = value.partition(",")
    if not header.startswith("data:") or ";base64" not in header:
        raise invalid(f"{param}: expected a base64 data URL", param, code="invalid_image")
    if max_bytes is not None and len(payload) * 3 // 4 > max_bytes + 2:
        raise _too_big(param, f"about {len(payload) * 3 // 4}", max_bytes)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(f"{param}: invalid base64 data", param, code="invalid_image") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise _too_big(param, len(data), max_bytes)
    return data


async def fetch_url(
    url: str,
    *,
    param: str,
    allowed_hosts: frozenset[str],
    max_bytes: int,
    deadline_s: float = FETCH_DEADLINE_S,
) -> bytes:
    """Fetch a media URL (image, audio, video) only if its host is allow-listed: size-bounded,
    no redirects, and finished within ``deadline_s`` in all (a slow server cannot hold it)."""
    if url.startswith("data:"):
        return parse_data_url(url, param, max_bytes)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise invalid(
            f"{param}: expected an http(s) URL, a data URL or a file upload",
            param,
            code="invalid_url",
        )
    if parts.hostname.lower() not in allowed_hosts:
        raise invalid(
            f"{param}: fetching URLs from {parts.hostname!r} is disabled on this server (start it "
            "with --allowed-url-hosts to allow a host); upload the file instead",
            param,
            code="url_fetch_disabled",
        )
    import asyncio

    try:
        async with asyncio.timeout(deadline_s):
            return await _download(url, param, max_bytes, min(10.0, deadline_s))
    except TimeoutError:
        raise invalid(
            f"{param}: fetching the URL took longer than {deadline_s:g} s",
            param,
            code="url_fetch_failed",
        ) from None


async def _download(url: str, param: str, max_bytes: int, timeout: float) -> bytes:
    import httpx

    chunks: list[bytes] = []
    size = 0
    try:
        async with (
            httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                raise invalid(
                    f"{param}: fetching the URL returned HTTP {response.status_code}",
                    param,
                    code="url_fetch_failed",
                )
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise _too_big(param, f"more than {max_bytes}", max_bytes)
                chunks.append(chunk)
    except httpx.HTTPError as exc:
        raise invalid(
            f"{param}: fetching the URL failed: {exc}", param, code="url_fetch_failed"
        ) from None
    return b"".join(chunks)


def frames_of(result: Any) -> tuple[np.ndarray, int]:
    """Video frames and fps of a result (images stacked if a pipeline returned frames as images)."""
    import numpy as np

    if result.video is not None:
        return np.asarray(result.video), int(result.fps or 16)
    if result.images:
        frames = np.stack([np.asarray(im.convert("RGB")) for im in result.images])
        return frames, int(result.fps or 16)
    raise ValueError("the pipeline returned no video frames")


def sound_of(result: Any) -> tuple[np.ndarray, int] | None:
    """A video result's sound track (its ``audio`` at its ``sample_rate``), or None."""
    if result.audio is None or not result.sample_rate:
        return None
    return result.audio, int(result.sample_rate)
