"""The HTTP side of ``omni bench serve --task chat``: streamed answers from a running server with
the official ``openai`` client (``AsyncOpenAI``), as applications read them.

Each answer is ``chat.completions.create(stream=True, stream_options={"include_usage": True})``
with ``modalities`` ``["text", "audio"]`` (or ``["text"]``), ``max_tokens``, ``temperature`` 0
and a seed per answer index; ``extra_body`` carries ``--extra``. Two ways to ask for the audio:

- ``vllm`` (default): as vLLM-Omni's clients do, no ``audio`` object; the server labels every
  chunk ``modality: "text"|"audio"`` and an audio chunk's ``delta.content`` is a base64 WAV of
  that piece (its header gives the rate, its frames the length);
- ``openai``: ``audio={"voice", "format": "pcm16"}``; ``delta.audio.data`` pieces are PCM16 at
  the ``x-omni-sample-rate`` header's rate.

A level opens ``concurrency`` answers at once, ``rounds`` times; the clock of each answer starts
just before its request is sent.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import io
import re
import time
import wave
from typing import Any

from omni_core.bench.chat_stats import PROMPT, Answer, Level


def _wav_samples(data: bytes) -> tuple[int, int]:
    """(frames, rate) of a WAV file's bytes."""
    with wave.open(io.BytesIO(data), "rb") as handle:
        return handle.getnframes(), handle.getframerate()


class HttpChat:
    """Answers from ``base_url`` (an ``AsyncOpenAI`` client of its own)."""

    def __init__(self, base_url: str, api_key: str | None, model: str, settings: Any) -> None:
        import openai

        self.model, self.settings = model, settings
        self.client = openai.AsyncOpenAI(
            base_url=base_url.rstrip("/") + "/v1",
            api_key=api_key or "unused",
            max_retries=0,
            timeout=settings.timeout_s,
        )

    def _body(self, index: int, mode: str) -> dict[str, Any]:
        s = self.settings
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": PROMPT.format(index)}],
            "modalities": ["text", "audio"] if mode == "audio" else ["text"],
            "max_tokens": s.max_tokens,
            "temperature": 0,
            "seed": s.seed + index,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if mode == "audio" and s.audio_shape == "openai":
            body["audio"] = {"format": "pcm16", **({"voice": s.voice} if s.voice else {})}
        if s.extra:
            body["extra_body"] = dict(s.extra)
        return body

    async def answer(self, index: int, mode: str) -> Answer:
        """One streamed answer, measured; a failure is recorded, not raised."""
        answer = Answer(index=index, seed=self.settings.seed + index)
        start = time.perf_counter()
        try:
            raw = await self.client.chat.completions.with_raw_response.create(
                **self._body(index, mode)
            )
            rate = int(raw.headers.get("x-omni-sample-rate", "24000"))
            stream = raw.parse()  # openai 1.x: sync; newer clients may make it awaitable
            if inspect.isawaitable(stream):
                stream = await stream
            async for chunk in stream:
                at = time.perf_counter() - start
                if chunk.usage is not None:
                    answer.completion_tokens = chunk.usage.completion_tokens
                labelled = getattr(chunk, "modality", None)  # vLLM-Omni's extra field
                for choice in chunk.choices:
                    if choice.finish_reason and answer.finish_reason is None:
                        answer.finish_reason = choice.finish_reason
                    delta = choice.delta
                    if labelled == "audio":
                        if delta.content:
                            answer.add_audio(at, *_wav_samples(base64.b64decode(delta.content)))
                        continue
                    answer.add_text(at, delta.content or "")
                    audio = delta.to_dict().get("audio") or {}
                    if audio.get("data"):
                        answer.add_audio(at, len(base64.b64decode(audio["data"])) // 2, rate)
            answer.end_s = time.perf_counter() - start
        except Exception as exc:  # noqa: BLE001 - a benchmark records failures and goes on
            answer.error = f"{type(exc).__name__}: {exc}"[:300]
        return answer

    async def level(self, concurrency: int, mode: str, rounds: int) -> Level:
        level = Level("http", mode, concurrency)
        for _ in range(rounds):
            t0 = time.perf_counter()
            level.answers += await asyncio.gather(
                *(self.answer(i, mode) for i in range(concurrency))
            )
            level.wall_s += time.perf_counter() - t0
        return level

    async def close(self) -> None:
        await self.client.close()


_PEAK = re.compile(r'^omni_peak_device_memory_bytes\{model="([^"]*)"\}\s+(\S+)', re.M)


async def server_facts(base_url: str, api_key: str | None, model: str | None) -> dict[str, Any]:
    """The model to bench (``model``, else the first chat model listed) and the server's peak
    device memory for it (``/metrics``; None where the platform does not tell)."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers) as client:
        listed = await client.get("/v1/models", timeout=30)
        listed.raise_for_status()
        models = listed.json()["data"]
        chat = [m for m in models if m.get("modality") == "chat"]
        if model is None:
            if not chat:
                ids = [m["id"] for m in models]
                raise RuntimeError(f"the server serves no chat model: {ids}")
            model = str(chat[0]["id"])
        described = next((m for m in models if m["id"] == model), None)
        if described is None:
            raise RuntimeError(f"the server does not serve {model!r}: {[m['id'] for m in models]}")
        peak = None
        metrics = await client.get("/metrics", timeout=30)
        if metrics.status_code == 200:
            for name, value in _PEAK.findall(metrics.text):
                if name == model:
                    peak = int(float(value))
    return {"model": model, "modalities": described.get("modalities"), "peak_bytes": peak}


__all__ = ["HttpChat", "server_facts"]
