"""Inputs and response readers of the chat-answer tests: tiny media files made here, data
URLs, OpenAI-style error bodies and SSE events."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import numpy as np


def wav_bytes(seconds: float, rate: int = 16000) -> bytes:
    from omni_core.media import audio

    t = np.arange(int(seconds * rate)) / rate
    return audio.encode_audio((0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), rate, "wav")


def png_bytes(size: tuple[int, int]) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, "blue").save(buf, format="PNG")
    return buf.getvalue()


def mp4_bytes(frames: int, size: tuple[int, int], fps: int, sound_s: float = 0.0) -> bytes:
    """An H.264 clip in mp4 or, with a PCM sound track of ``sound_s`` seconds, in mov."""
    import av

    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mov" if sound_s else "mp4") as out:
        video = out.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = size[0], size[1], "yuv420p"
        sound = out.add_stream("pcm_s16le", rate=16000, layout="mono") if sound_s else None
        for i in range(frames):
            pixels = np.full((size[1], size[0], 3), i * 7 % 255, np.uint8)
            out.mux(video.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")))
        out.mux(video.encode())
        if sound is not None:
            samples = (0.3 * np.sin(np.arange(int(sound_s * 16000)) / 9) * 32767).astype(np.int16)
            frame = av.AudioFrame.from_ndarray(samples[None], format="s16", layout="mono")
            frame.sample_rate = 16000
            out.mux(sound.encode(frame))
            out.mux(sound.encode())
    return buf.getvalue()


def data_url(blob: bytes, mime: str) -> str:
    return f"data:{mime};base64," + base64.b64encode(blob).decode()


def error_of(response: Any, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    if param is not None:
        assert error["param"] == param, error
    return error


def sse_events(response: Any) -> list[Any]:
    lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]", lines[-3:]
    return [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
