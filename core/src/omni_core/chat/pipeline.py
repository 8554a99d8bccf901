"""The chat pipeline contract: a conversation in, streamed text (and speech) out.

:class:`ChatPipeline` is what ``/v1/chat/completions``, ``Omni(...).chat(...)`` and
``omni generate chat`` drive for text and omni models: :meth:`~ChatPipeline.chat` yields
:class:`~omni_core.chat.ChatDelta` objects for one validated request (its ``messages``,
``modalities``, ``voice``, ``max_tokens``, ``temperature``, ``top_p``, ``seed``).

Autoregressive models subclass :class:`AutoregressiveChatPipeline` and write stages instead of
loops (:mod:`omni_core.autoregressive.text`): the core's
:class:`~omni_core.autoregressive.chat_runtime.ChatRuntime` batches the thinker's decode steps
of every request in flight, drives the talker chain of the requests that asked for audio, and
streams both out; the engine steps it once per loop iteration.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar

from omni_core.errors import InvalidRequestError
from omni_core.pipelines.base import GenerationRequest, Pipeline, Voice

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.autoregressive.chat_runtime import ChatRuntime, ChatStream
    from omni_core.autoregressive.text import TextStages, TextState
    from omni_core.chat.types import ChatDelta, Modality


class ChatPipeline(Pipeline):
    """A model that answers conversations (``tasks=("chat",)`` in its spec)."""

    #: What the loaded model can answer with; a model loaded without its talker answers
    #: ``("text",)`` only (set it in ``from_pretrained``).
    output_modalities: tuple[Modality, ...] = ("text",)

    @abstractmethod
    def chat(self, request: GenerationRequest) -> Iterator[ChatDelta]:
        """Yield the answer's deltas; the last one has ``finish_reason`` and ``usage``."""

    def voices(self) -> list[Voice]:
        """The voices the answer can be spoken in (``GET /v1/audio/voices``)."""
        return []

    def shared_runtime(self) -> ChatRuntime | None:
        """The runtime that advances every open answer in one step (autoregressive models):
        the engine steps it once per loop iteration and polls the streams. None: each answer
        advances alone."""
        return None

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        """Check what every chat model needs: a conversation that ends with a user turn, the
        modalities this model answers with, a voice it has."""
        request = super().validate(request)
        if not request.messages:
            raise InvalidRequestError(
                "messages: the conversation is empty; a chat model answers messages "
                "(Omni(...).chat(text), omni generate chat, POST /v1/chat/completions)",
                param="messages",
            )
        if request.messages[-1].role != "user":
            raise InvalidRequestError(
                "messages: the last message must be the user's (the model answers it)",
                param="messages",
            )
        unknown = [m for m in request.modalities if m not in self.output_modalities]
        if unknown or not request.modalities:
            served = ", ".join(self.output_modalities)
            raise InvalidRequestError(
                f"modalities={list(request.modalities)!r}: this model answers with {served}"
                + (" (loaded without its talker)" if "audio" in unknown else ""),
                param="modalities",
            )
        if request.voice and "audio" in request.modalities:
            ids = [v.id for v in self.voices()]
            if request.voice not in ids:
                raise InvalidRequestError(
                    f"audio.voice: unknown voice {request.voice!r}; available: {', '.join(ids)}",
                    param="audio.voice",
                )
        return request


class AutoregressiveChatPipeline(ChatPipeline):
    """A chat pipeline whose requests share the steps of one :class:`ChatRuntime`.

    Implement :meth:`stages` (the thinker, the detokenizer, the talker side) and
    :meth:`prepare` (a validated request -> a :class:`~omni_core.autoregressive.TextState`).
    """

    #: Requests one step carries at most (the runtime's cache slots); more wait their turn.
    max_concurrency: ClassVar[int] = 64

    _runtime: ChatRuntime | None = None

    def concurrency(self, max_batch: int) -> int:
        """Every request in flight shares the runtime's steps: as many as it has slots."""
        return self.max_concurrency

    @abstractmethod
    def stages(self) -> TextStages:
        """The chain of this loaded model (called once, when the runtime is built)."""

    @abstractmethod
    def prepare(self, request: GenerationRequest) -> TextState:
        """Build one request's prompt and per-request data; ``request`` is validated."""

    def shared_runtime(self) -> ChatRuntime:
        """The runtime of this pipeline, built on first use."""
        if self._runtime is None:
            from omni_core.autoregressive.chat_runtime import ChatRuntime

            device = self.options.device if self.options is not None else "cpu"
            stages = self.stages()
            self._runtime = ChatRuntime(stages, max_batch=self.max_concurrency, device=device)
        return self._runtime

    def open(self, request: GenerationRequest, *, timeout_s: float | None = None) -> ChatStream:
        """Queue a validated request on the runtime; iterate (or poll) the stream it returns."""
        return self.shared_runtime().open(self.prepare(request), timeout_s=timeout_s)

    def chat(self, request: GenerationRequest) -> Iterator[ChatDelta]:
        return self.open(request)
