"""The one autoregressive pipeline base: requests share the steps of one slot runtime.

Speech (:class:`~omni_core.speech.AutoregressiveSpeechPipeline`) and chat
(:class:`~omni_core.chat.AutoregressiveChatPipeline`) pipelines both subclass
:class:`AutoregressivePipeline`: a plugin loads its modules in ``from_pretrained`` (setting
:attr:`~omni_core.contract.pipeline.Pipeline.options`) and writes

- :meth:`~AutoregressivePipeline.stages`: the chain of its loaded model (built once);
- :meth:`~AutoregressivePipeline.prepare`: a validated request -> the runtime's per-request state.

The base owns the rest: one runtime per loaded pipeline, built on first use with as many cache
slots as :attr:`~AutoregressivePipeline.max_concurrency`; the engine steps it once per loop
iteration (so concurrent requests share decode steps) and polls the streams it opened.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar, Generic, TypeVar

from omni_core.contract.pipeline import StreamedPipeline
from omni_core.contract.types import GenerationRequest
from omni_core.runtime.slots import SlotRuntime, SlotStream

D = TypeVar("D")  # the delta its streams hand out
Stages = TypeVar("Stages")  # what stages() returns
State = TypeVar("State")  # what prepare() returns
Runtime = TypeVar("Runtime", bound=SlotRuntime[Any])


class AutoregressivePipeline(StreamedPipeline[D], Generic[D, Stages, State, Runtime]):
    """A streamed pipeline whose requests share the steps of one :class:`SlotRuntime`."""

    #: Requests one step carries at most (the runtime's cache slots); more wait their turn.
    max_concurrency: ClassVar[int] = 64

    _runtime: Runtime | None = None

    def concurrency(self, max_batch: int) -> int:
        """Every request in flight shares the runtime's steps: as many as it has slots."""
        return self.max_concurrency

    @abstractmethod
    def stages(self) -> Stages:
        """The chain of this loaded model (called once, when the runtime is built)."""

    @abstractmethod
    def prepare(self, request: GenerationRequest) -> State:
        """Build one request's prompt and per-request data; ``request`` is validated."""

    @abstractmethod
    def make_runtime(self, stages: Stages, *, max_batch: int, device: Any) -> Runtime:
        """The runtime that drives ``stages`` (the lane's base says which)."""

    def shared_runtime(self) -> Runtime:
        """The runtime of this pipeline, built on first use."""
        if self._runtime is None:
            device = self.options.device if self.options is not None else "cpu"
            self._runtime = self.make_runtime(
                self.stages(), max_batch=self.max_concurrency, device=device
            )
        return self._runtime

    def open(self, request: GenerationRequest, *, timeout_s: float | None = None) -> SlotStream[D]:
        """Queue a validated request on the runtime; iterate (or poll) the stream it returns."""
        runtime = self.shared_runtime()
        stream: SlotStream[D] = runtime.open(self.prepare(request), timeout_s=timeout_s)
        return stream

    def open_stream(self, request: GenerationRequest) -> Iterator[D]:
        return self.open(request)
