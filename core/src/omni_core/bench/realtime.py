"""``omni bench serve --task realtime``: spoken turns over ``/v1/realtime``, one session each.

A session connects, turns server VAD off (``--extra '{"turn_detection": "server_vad"}'``
keeps it: then the turn ends by itself after the clip's trailing silence, and the clock starts
at ``input_audio_buffer.speech_stopped``), appends one second of a voiced clip in 100 ms pieces,
commits it and asks for an answer. Measured from the commit (or the end of speech) to the first
``response.output_audio.delta`` (``ttfb_s``) and to ``response.done`` (``latency_s``); the real-
time factor is that latency over the seconds of audio the answer held. ``--max-concurrency``
sessions run at once; ``max_output_tokens`` (default 64) and ``temperature`` in ``--extra`` go
to each session.
"""

from __future__ import annotations

import base64
import functools
import json
import time
from typing import Any

RATE = 24000


@functools.cache
def voiced_clip(seconds: float = 1.0) -> bytes:
    """PCM16 of a vowel-like signal (a gliding 140 Hz pulse train with formants: what VAD
    takes for speech), then 0.8 s of silence."""
    import numpy as np

    n = int(seconds * RATE)
    t = np.arange(n) / RATE
    phase = np.cumsum((140 + 30 * np.sin(2 * np.pi * 0.7 * t)) / RATE)
    source = sum(np.sin(2 * np.pi * k * phase) / k**1.5 for k in range(1, 40))
    freqs = np.fft.rfftfreq(n, 1 / RATE)
    envelope = sum(1 / (1 + ((freqs - f) / (60 + f * 0.05)) ** 2) for f in (730, 1090, 2440))
    voiced = np.fft.irfft(np.fft.rfft(source) * envelope, n)
    samples = np.concatenate([0.3 * voiced / np.abs(voiced).max(), np.zeros(int(0.8 * RATE))])
    return (samples * 32767).astype("<i2").tobytes()


def ws_url(base_url: str, model: str) -> str:
    base = base_url.rstrip("/")
    scheme = "wss" if base.startswith("https") else "ws"
    return f"{scheme}{base[base.index(':') :]}/v1/realtime?model={model}"


async def realtime_turn(config: Any, record: Any) -> None:
    """One session, one spoken turn; fills ``record`` (ttfb_s, audio_s, latency_s)."""
    import websockets

    clip = voiced_clip()
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    vad = config.extra.get("turn_detection") == "server_vad"
    tokens = config.extra.get("max_output_tokens", 64)
    async with websockets.connect(
        ws_url(config.base_url, config.model), additional_headers=headers, max_size=None
    ) as ws:

        async def send(event: dict[str, Any]) -> None:
            await ws.send(json.dumps(event))

        async def until(kind: str) -> dict[str, Any]:
            while True:
                event = json.loads(await ws.recv())
                if event["type"] == "error":
                    raise RuntimeError(f"{event['error']['code']}: {event['error']['message']}")
                if event["type"] == kind:
                    return event

        await until("session.created")
        detection = {"type": "server_vad", "silence_duration_ms": 500} if vad else None
        session: dict[str, Any] = {"type": "realtime", "max_output_tokens": tokens}
        session["audio"] = {"input": {"turn_detection": detection}}
        if "temperature" in config.extra:
            session["temperature"] = config.extra["temperature"]
        await send({"type": "session.update", "session": session})
        await until("session.updated")
        for at in range(0, len(clip), RATE // 5):  # 100 ms of PCM16
            await send(
                {
                    "type": "input_audio_buffer.append",
                    "audio": base64.b64encode(clip[at : at + RATE // 5]).decode(),
                }
            )
        if vad:
            await until("input_audio_buffer.speech_stopped")
            start = time.perf_counter()
        else:
            start = time.perf_counter()
            await send({"type": "input_audio_buffer.commit"})
            await send({"type": "response.create"})
        nbytes = 0
        while True:
            event = json.loads(await ws.recv())
            kind = event["type"]
            if kind == "response.output_audio.delta":
                if record.ttfb_s is None:
                    record.ttfb_s = time.perf_counter() - start
                nbytes += len(base64.b64decode(event["delta"]))
            elif kind == "error":
                raise RuntimeError(f"{event['error']['code']}: {event['error']['message']}")
            elif kind == "response.done":
                status = event["response"]["status"]
                if status != "completed":
                    raise RuntimeError(f"the answer ended {status}")
                break
        record.latency_s = time.perf_counter() - start
        record.audio_s = nbytes / 2 / RATE
