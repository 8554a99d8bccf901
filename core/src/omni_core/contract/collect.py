"""A stream's deltas gathered into its whole result: speech chunks (:class:`SpeechCollector`)
and chat deltas (:class:`ChatCollector`). A streamed pipeline names its collector
(:meth:`~omni_core.contract.pipeline.StreamedPipeline.collector`); the engine, the Python API
and the server gather with it, so a whole answer is always its streamed deltas joined."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Generic, TypeVar

from omni_core.contract.errors import InvalidRequestError
from omni_core.contract.messages import ChatDelta, ChatUsage
from omni_core.contract.types import AudioChunk, GenerationResult

D = TypeVar("D")


class Collector(ABC, Generic[D]):
    """Gathers one stream's deltas; :meth:`result` is the whole answer with its timings."""

    @abstractmethod
    def add(self, delta: D) -> None:
        """Take one delta, in stream order."""

    @abstractmethod
    def result(self) -> GenerationResult:
        """The whole answer (InvalidRequestError when the stream made nothing usable)."""


def speech_result(
    chunks: list[AudioChunk], first_chunk_s: float, total_s: float
) -> GenerationResult:
    """The whole-file result of a streamed speech request (its deltas concatenated)."""
    import numpy as np

    audio = np.concatenate([c.samples for c in chunks]).astype(np.float32)
    rate = chunks[0].sample_rate
    return GenerationResult(
        audio=audio,
        sample_rate=rate,
        timings={
            "time_to_first_audio_s": first_chunk_s,
            "generate_s": total_s,
            "real_time_factor": total_s / max(len(audio) / rate, 1e-9),
        },
    )


class SpeechCollector(Collector[AudioChunk]):
    """Audio deltas -> the whole file (:func:`speech_result`)."""

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


class ChatCollector(Collector[ChatDelta]):
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
