"""Audio and video inputs of a chat request, decoded with bounds (no FastAPI here: ``omni
generate chat`` decodes its local files with the same code and limits).

Audio goes through the uploaded-voice decoder (:func:`omni_core.speech.voices.decode_reference`:
container allow-list, bounded bytes and seconds) with :data:`MAX_AUDIO_SECONDS`. A video keeps at
most :data:`MAX_VIDEO_FRAMES` frames and :data:`MAX_VIDEO_PIXELS` decoded pixels: a longer clip
is sampled evenly in time and its ``fps`` lowered to match; its sound track, when it has one,
comes with it. Anything undecodable is an :class:`~omni_core.contract.errors.InvalidRequestError`
naming the part.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

from omni_core.contract.errors import InvalidRequestError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

#: Longest audio input (seconds, each part).
MAX_AUDIO_SECONDS = 300.0
#: Most frames kept of one video, and most decoded pixels (frames x width x height) of one.
MAX_VIDEO_FRAMES = 128
MAX_VIDEO_PIXELS = 48 * 1024 * 1024
#: Container formats a video may be (PyAV's names); anything else is refused undecoded.
VIDEO_CONTAINERS = frozenset({"mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm", "avi"})


def decode_audio(data: bytes, param: str) -> tuple[np.ndarray, int]:
    """Audio file bytes -> (float32 mono, its rate), bounded."""
    from omni_core.speech.voices import decode_reference

    try:
        return decode_reference(data, param=param, max_seconds=MAX_AUDIO_SECONDS)
    except InvalidRequestError as exc:  # named by this part, whatever the decoder called it
        raise InvalidRequestError(exc.message, param=param, code=exc.code) from None


@dataclass
class DecodedVideo:
    frames: np.ndarray  # [frames, H, W, 3] uint8
    fps: float
    audio: np.ndarray | None = None
    sample_rate: int | None = None
    #: The clip's frame count when it was sampled down.
    sampled_from: int | None = None


def decode_video(
    data: bytes, param: str, max_pixels: int, num_frames: int | None = None
) -> DecodedVideo:
    """An mp4 / webm / mov clip -> RGB frames (evenly sampled when long, or to ``num_frames``)
    and its sound track; ``max_pixels`` bounds one frame."""
    import av
    import numpy as np

    def bad(why: str, code: str = "invalid_video") -> InvalidRequestError:
        return InvalidRequestError(f"{param}: {why}", param=param, code=code)

    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if container.format.name not in VIDEO_CONTAINERS or not container.streams.video:
                raise bad("not a video file omni reads (mp4, mov, webm, mkv or avi)")
            stream = container.streams.video[0]
            width, height = int(stream.codec_context.width), int(stream.codec_context.height)
            if width * height <= 0 or width * height > max_pixels:
                raise bad(
                    f"frames of {width}x{height} pixels are above this server's limit of "
                    f"{max_pixels} pixels (--max-upload-pixels)",
                    "video_too_large",
                )
            rate = float(stream.average_rate or stream.guessed_rate or 25)
            total = int(stream.frames or 0)
            if total <= 0 and stream.duration is not None and stream.time_base is not None:
                total = int(float(stream.duration * stream.time_base) * rate)
            keep = max(
                1,
                min(
                    num_frames or MAX_VIDEO_FRAMES,
                    MAX_VIDEO_FRAMES,
                    MAX_VIDEO_PIXELS // (width * height),
                ),
            )
            every = total / keep if total > keep else 1.0
            frames: list[np.ndarray] = []
            seen = 0
            for index, frame in enumerate(container.decode(video=0)):
                seen = index + 1
                if len(frames) < keep and index >= len(frames) * every - 1e-6:
                    frames.append(frame.to_ndarray(format="rgb24"))
                if seen > keep * every + MAX_VIDEO_FRAMES:  # its header understated its length
                    raise bad(f"longer than its header says ({seen} frames)", "video_too_long")
            has_audio = bool(container.streams.audio)
    except InvalidRequestError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever PyAV raises on hostile input
        raise bad(f"could not decode the video ({type(exc).__name__})") from None
    if not frames:
        raise bad("the video has no frames")
    sampled = seen > len(frames)
    video = DecodedVideo(
        np.stack(frames),
        rate * len(frames) / seen if sampled else rate,
        sampled_from=seen if sampled else None,
    )
    if has_audio:
        try:
            video.audio, video.sample_rate = decode_audio(data, param)
        except InvalidRequestError:
            pass  # a silent or unreadable sound track: the frames alone
    return video
