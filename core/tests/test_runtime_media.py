"""PNG and MP4 encoding (PyAV / libx264) round trips."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from omni_core.contract.errors import InvalidRequestError
from omni_core.media.visual import (
    decode_mp4,
    decode_mp4_audio,
    encode_image,
    encode_mp4,
    encode_png,
    save_image,
    save_video,
)


def _video(frames: int = 6, height: int = 16, width: int = 24) -> np.ndarray:
    ramp = np.linspace(0, 255, width, dtype=np.float32)[None, None, :, None]
    video = np.broadcast_to(ramp, (frames, height, width, 3)).copy()
    video[:, :, :, 1] = np.arange(frames)[:, None, None] * 30
    return video.astype(np.uint8)


def test_runtime_mp4_round_trip(tmp_path: Path) -> None:
    video = _video()
    data = encode_mp4(video, fps=8)
    assert data[4:8] == b"ftyp"
    decoded = decode_mp4(data)
    assert decoded.shape == video.shape
    assert np.abs(decoded.astype(int) - video.astype(int)).mean() < 4  # lossy but close
    path = save_video(video, tmp_path / "a.mp4", fps=8)
    assert decode_mp4(path).shape == video.shape


def _tones(seconds: float, rate: int, *freqs: float) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return np.stack([0.5 * np.sin(2 * np.pi * f * t) for f in freqs], axis=1).astype(np.float32)


def _peak_hz(channel: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(channel))
    return float(np.fft.rfftfreq(len(channel), 1 / rate)[int(spectrum.argmax())])


def test_runtime_mp4_sound_track_round_trip(tmp_path: Path) -> None:
    video, sound = _video(), _tones(1.0, 16000, 440.0, 220.0)
    data = encode_mp4(video, fps=8, audio=(sound, 16000))
    assert np.array_equal(decode_mp4(data), decode_mp4(encode_mp4(video, fps=8)))
    decoded, rate = decode_mp4_audio(data)  # type: ignore[misc]
    assert rate == 16000 and decoded.shape[1] == 2 and decoded.shape[0] >= len(sound)
    for channel in (0, 1):  # lined up with what was written (AAC's priming dropped)
        assert np.corrcoef(decoded[: len(sound), channel], sound[:, channel])[0, 1] > 0.99
    for channel, hz in ((0, 440.0), (1, 220.0)):  # each channel keeps its own tone and level
        assert abs(_peak_hz(decoded[:, channel], rate) - hz) < 2
        rms = float(np.sqrt(np.mean(decoded[:, channel] ** 2)))
        assert abs(rms - 0.5 / np.sqrt(2)) < 0.05
    path = save_video(video, tmp_path / "s.mp4", fps=8, audio=(sound[:, 0], 22000))
    mono, rate = decode_mp4_audio(path)  # type: ignore[misc]
    assert rate == 48000 and mono.shape[1] == 1  # 22 kHz is no AAC rate: resampled
    assert abs(_peak_hz(mono[:, 0], rate) - 440.0 * 22000 / 16000) < 3
    assert decode_mp4_audio(encode_mp4(video, fps=8)) is None
    with pytest.raises(ValueError, match="audio must be"):
        encode_mp4(video, audio=(np.zeros((10, 3), np.float32), 16000))


def test_runtime_mp4_odd_sizes_are_padded() -> None:
    decoded = decode_mp4(encode_mp4(_video(height=15, width=23)))
    assert decoded.shape == (6, 16, 24, 3)


def test_runtime_video_frames_and_errors(tmp_path: Path) -> None:
    folder = save_video(_video(frames=3), str(tmp_path / "frames") + "/")
    assert sorted(p.name for p in folder.iterdir()) == [f"frame_0000{i}.png" for i in range(3)]
    with pytest.raises(InvalidRequestError, match=r"use \.mp4"):
        save_video(_video(), tmp_path / "a.gif")
    with pytest.raises(ValueError, match="uint8"):
        encode_mp4(_video().astype(np.float32))


def test_runtime_images(tmp_path: Path) -> None:
    from PIL import Image

    image = Image.fromarray(_video()[0])
    assert encode_png(image).startswith(b"\x89PNG")
    assert encode_image(image, "jpg")[:2] == b"\xff\xd8"
    assert Image.open(save_image(image, tmp_path / "x.webp")).format == "WEBP"
    with pytest.raises(InvalidRequestError, match="unknown image format"):
        encode_image(image, "bmp")
