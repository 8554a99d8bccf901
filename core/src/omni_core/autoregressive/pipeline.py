"""The speech pipeline base of autoregressive models: a plugin writes stages, not loops.

Subclass :class:`AutoregressiveSpeechPipeline`, load your modules in ``from_pretrained`` (set
:attr:`options`), and implement two members:

- :meth:`~AutoregressiveSpeechPipeline.stages`: the chain the runtime drives (decoder stage,
  frame stages, codec, chunk schedule, cache length);
- :meth:`~AutoregressiveSpeechPipeline.prepare`: a validated request -> an
  :class:`~omni_core.autoregressive.ARState` (prompt embeddings, per-request data).

Everything else is the core's: one :class:`~omni_core.autoregressive.ARRuntime` per loaded
pipeline, shared by every request (the engine steps it once per loop iteration, so concurrent
requests share decode steps), delta streaming at the requested rate and speed, cancellation and
time limits between steps. Override :meth:`~omni_core.SpeechPipeline.prepare_voice` to let
users upload voices (``POST /v1/audio/voices``) and clone them.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar

from omni_core.audio.speech import StreamingSpeechPipeline
from omni_core.pipelines.base import AudioChunk, GenerationRequest

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from omni_core.autoregressive.runtime import ARRuntime, SpeechStream
    from omni_core.autoregressive.stages import ARState, SpeechStages


class AutoregressiveSpeechPipeline(StreamingSpeechPipeline):
    """A speech pipeline whose requests share the decode steps of one :class:`ARRuntime`."""

    #: Requests one step carries at most (the runtime's cache slots); more wait their turn.
    max_concurrency: ClassVar[int] = 64

    _runtime: ARRuntime | None = None

    def concurrency(self, max_batch: int) -> int:
        """Every request in flight shares the runtime's steps: as many as it has slots."""
        return self.max_concurrency

    @abstractmethod
    def stages(self) -> SpeechStages:
        """The chain of this loaded model (called once, when the runtime is built)."""

    @abstractmethod
    def prepare(self, request: GenerationRequest) -> ARState:
        """Build one request's prompt and per-request data; ``request`` is validated."""

    def shared_runtime(self) -> ARRuntime:
        """The runtime of this pipeline, built on first use."""
        if self._runtime is None:
            from omni_core.autoregressive.runtime import ARRuntime

            stages = self.stages()
            self.sample_rate = stages.codec.sample_rate
            device = self.options.device if self.options is not None else "cpu"
            self._runtime = ARRuntime(stages, max_batch=self.max_concurrency, device=device)
        return self._runtime

    def open(self, request: GenerationRequest, *, timeout_s: float | None = None) -> SpeechStream:
        """Queue a validated request on the runtime; iterate (or poll) the stream it returns."""
        from omni_core.audio.dsp import SpeechPostprocessor

        runtime = self.shared_runtime()
        state = self.prepare(request)
        speed = 1.0 if self.native_speed else request.speed
        post = SpeechPostprocessor(
            runtime.sample_rate, sample_rate=request.sample_rate, speed=speed
        )
        return runtime.open(state, post, timeout_s=timeout_s)

    def _stream(self, request: GenerationRequest) -> Iterator[AudioChunk]:
        return self.open(request)

    def synthesize(self, request: GenerationRequest) -> Iterator[np.ndarray]:
        """Native-rate chunks of one request (the runtime stepped by this iterator)."""
        runtime = self.shared_runtime()
        for chunk in runtime.open(self.prepare(request)):
            yield chunk.samples
