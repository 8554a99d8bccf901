"""Read what omni wrote (audio and video files, response bodies) and write the clips a test
feeds it, with omni's own codecs: a round trip through them is what a user gets.

- :func:`read_audio`: a file (or bytes) of any format ``omni generate speech`` / the server
  write (wav, flac, mp3, raw pcm) -> float32 mono samples and the rate;
- :func:`write_audio`: samples -> a file in the format its suffix names (a reference voice);
- :func:`read_video`: an MP4 file (or bytes) -> ``uint8 [frames, height, width, 3]``.
- :func:`read_video_sound`: an MP4's sound track -> float32 ``[samples, channels]`` and its
  rate, or None.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


def read_audio(
    source: bytes | str | os.PathLike[str],
    fmt: str | None = None,
    *,
    sample_rate: int | None = None,
) -> tuple[np.ndarray, int]:
    """``(samples, rate)`` of ``source``: bytes, or a path whose suffix names the format unless
    ``fmt`` does. Raw ``pcm`` carries no rate: give ``sample_rate``."""
    from omni_core.media.audio import decode_audio, format_for_path

    if isinstance(source, bytes):
        data, fmt = source, fmt or "wav"
    else:
        data, fmt = Path(source).read_bytes(), format_for_path(source, fmt)
    return decode_audio(data, fmt, sample_rate=sample_rate)


def write_audio(
    path: str | os.PathLike[str], samples: np.ndarray, sample_rate: int, fmt: str | None = None
) -> Path:
    """Write float mono ``samples`` in [-1, 1] to ``path`` (format from the suffix unless
    ``fmt``), as omni writes its outputs; returns the path."""
    from omni_core.media.audio import write_audio as write

    return write(path, samples, sample_rate, fmt)


def read_video(source: bytes | str | os.PathLike[str]) -> np.ndarray:
    """The frames of an MP4 (a path or bytes) as ``uint8 [F, H, W, 3]``."""
    from omni_core.media.visual import decode_mp4

    return decode_mp4(source)


def read_video_sound(source: bytes | str | os.PathLike[str]) -> tuple[np.ndarray, int] | None:
    """The sound track of an MP4 (a path or bytes) as float32 ``[samples, channels]`` and its
    rate (the codec's priming dropped), or None without one."""
    from omni_core.media.visual import decode_mp4_audio

    return decode_mp4_audio(source)
