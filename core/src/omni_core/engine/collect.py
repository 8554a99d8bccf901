"""A stream's items gathered into its whole result: speech chunks (:class:`SpeechCollector`)
and chat deltas (:class:`ChatCollector`, which ``Omni(...).chat(...)`` uses too)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from omni_core.chat.types import ChatDelta, ChatUsage
from omni_core.engine.job import speech_result
from omni_core.errors import InvalidRequestError
from omni_core.pipelines.base import AudioChunk, GenerationResult

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.engine.job import Job
    from omni_core.pipelines.base import Pipeline


class SpeechCollector:
    """Audio deltas -> the whole file (:func:`~omni_core.engine.job.speech_result`)."""

    def __init__(self, started: float | None = None) -> None:
        self.started = time.monotonic() if started is None else started
        self.chunks: list[AudioChunk] = []
        self.first_s: float | None = None

    def add(self, chunk: AudioChunk) -> None:
        if self.first_s is None:
            self.first_s = time.monotonic() - self.started
        self.chunks.append(chunk)

    def result(self) -> GenerationResult:
        if not self.chunks:
            raise InvalidRequestError("the model produced no audio", param="input")
        total = time.monotonic() - self.started
        return speech_result(self.chunks, self.first_s or 0.0, total)


class ChatCollector:
    """Collects :class:`~omni_core.chat.ChatDelta` objects; :meth:`result` is the answer:
    ``text``, ``audio`` (the audio deltas concatenated, None without any) at ``sample_rate``,
    ``info["finish_reason"]`` and ``info["usage"]`` (a :class:`~omni_core.chat.ChatUsage`),
    and timings (time to the first token and the first audio, tokens per second)."""

    def __init__(self, started: float | None = None) -> None:
        self.started = time.monotonic() if started is None else started
        self.text: list[str] = []
        self.audio: list[AudioChunk] = []
        self.first_token_s: float | None = None
        self.first_audio_s: float | None = None
        self.finish_reason: str | None = None
        self.usage: ChatUsage | None = None

    def add(self, delta: ChatDelta) -> None:
        at = time.monotonic() - self.started
        if delta.text:
            self.text.append(delta.text)
            if self.first_token_s is None:
                self.first_token_s = at
        if delta.audio is not None and len(delta.audio.samples):
            self.audio.append(delta.audio)
            if self.first_audio_s is None:
                self.first_audio_s = at
        if delta.finish_reason is not None:
            self.finish_reason = delta.finish_reason
        if delta.usage is not None:
            self.usage = delta.usage

    def result(self) -> GenerationResult:
        import numpy as np

        total = time.monotonic() - self.started
        usage = self.usage or ChatUsage()
        timings = {"generate_s": total}
        if self.first_token_s is not None:
            timings["time_to_first_token_s"] = self.first_token_s
        if usage.completion_tokens and total > 0:
            timings["tokens_per_s"] = usage.completion_tokens / total
        audio, rate = None, None
        if self.audio:
            audio = np.concatenate([c.samples for c in self.audio]).astype(np.float32)
            rate = self.audio[0].sample_rate
            timings["time_to_first_audio_s"] = self.first_audio_s or 0.0
            timings["real_time_factor"] = total / max(len(audio) / rate, 1e-9)
        return GenerationResult(
            text="".join(self.text),
            audio=audio,
            sample_rate=rate,
            timings=timings,
            info={"finish_reason": self.finish_reason or "stop", "usage": usage},
        )


#: What gathers one stream's pieces.
Collector = SpeechCollector | ChatCollector


def open_stream(pipeline: Pipeline, job: Job) -> tuple[Iterator[Any], Collector]:
    """The stream of a job on a chat or speech pipeline, and the collector of its pieces."""
    from omni_core.chat.pipeline import ChatPipeline
    from omni_core.pipelines.base import SpeechPipeline

    if isinstance(pipeline, ChatPipeline):
        return iter(pipeline.chat(job.request)), ChatCollector(job.started_at)
    assert isinstance(pipeline, SpeechPipeline)
    return iter(pipeline.stream(job.request)), SpeechCollector(job.started_at)
