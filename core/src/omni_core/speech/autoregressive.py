"""The speech pipeline base of autoregressive models: a plugin writes stages, not loops.

Subclass :class:`AutoregressiveSpeechPipeline`, load your modules in ``from_pretrained`` (set
:attr:`options`), and implement two members:

- :meth:`~AutoregressiveSpeechPipeline.stages`: the chain the runtime drives (decoder stage,
  frame stages, codec, chunk schedule, cache length);
- :meth:`~AutoregressiveSpeechPipeline.prepare`: a validated request -> an
  :class:`~omni_core.speech.ARState` (prompt embeddings, per-request data).

Everything else is the core's: one :class:`~omni_core.speech.ARRuntime` per loaded pipeline, shared
by every request (the engine steps it once per loop iteration, so concurrent requests share decode
steps), delta streaming at the requested rate and speed, cancellation and time limits between steps.
Override :meth:`~omni_core.speech.SpeechPipeline.prepare_voice` to let users upload voices
(``POST /v1/audio/voices``) and clone them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from omni_core.contract.types import AudioChunk, GenerationRequest
from omni_core.runtime.autoregressive import AutoregressivePipeline
from omni_core.runtime.chain import ARRuntime, SpeechStream
from omni_core.runtime.stages import ARState, SpeechStages
from omni_core.speech.pipeline import StreamingSpeechPipeline

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


class AutoregressiveSpeechPipeline(
    AutoregressivePipeline[AudioChunk, SpeechStages, ARState, ARRuntime], StreamingSpeechPipeline
):
    """A speech pipeline whose requests share the decode steps of one :class:`ARRuntime`."""

    def make_runtime(self, stages: SpeechStages, *, max_batch: int, device: Any) -> ARRuntime:
        self.sample_rate = stages.codec.sample_rate
        return ARRuntime(stages, max_batch=max_batch, device=device)

    def open(self, request: GenerationRequest, *, timeout_s: float | None = None) -> SpeechStream:
        """Queue a validated request; its audio comes at the requested rate and speed."""
        from omni_core.media.dsp import SpeechPostprocessor

        runtime = self.shared_runtime()
        state = self.prepare(request)
        speed = 1.0 if self.native_speed else request.speed
        post = SpeechPostprocessor(
            runtime.sample_rate, sample_rate=request.sample_rate, speed=speed
        )
        return runtime.open(state, post, timeout_s=timeout_s)

    def open_stream(self, request: GenerationRequest) -> Iterator[AudioChunk]:
        return self.stream(request)  # validated, as every speech stream is

    def _stream(self, request: GenerationRequest) -> Iterator[AudioChunk]:
        return self.open(request)

    def synthesize(self, request: GenerationRequest) -> Iterator[np.ndarray]:
        """Native-rate chunks of one request (the runtime stepped by this iterator)."""
        runtime = self.shared_runtime()
        for chunk in runtime.open(self.prepare(request)):
            yield chunk.samples
