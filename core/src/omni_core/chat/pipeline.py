"""The chat pipeline contract: a conversation in, streamed text (and speech) out.

:class:`ChatPipeline` is what ``/v1/chat/completions``, ``Omni(...).chat(...)`` and
``omni generate chat`` drive for text and omni models: :meth:`~ChatPipeline.chat` yields
:class:`~omni_core.chat.ChatDelta` objects for one validated request (its ``messages``,
``modalities``, ``voice``, ``max_tokens``, ``temperature``, ``top_p``, ``seed``).

Autoregressive models subclass :class:`AutoregressiveChatPipeline` and write stages instead of loops
(:mod:`omni_core.chat.stages`): the core's :class:`~omni_core.chat.runtime.ChatRuntime` batches the
text stage's decode steps of every request in flight, drives the speech chain of the requests that
asked for audio, and streams both out; the engine steps it once per loop iteration.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from typing import Any

from omni_core.chat.runtime import ChatRuntime
from omni_core.chat.stages import TextStages, TextState
from omni_core.contract.collect import ChatCollector
from omni_core.contract.errors import InvalidRequestError
from omni_core.contract.messages import ChatDelta, ChatMessage, Modality, PartKind
from omni_core.contract.pipeline import StreamedPipeline
from omni_core.contract.types import GenerationRequest, Voice
from omni_core.runtime.autoregressive import AutoregressivePipeline


class ChatPipeline(StreamedPipeline[ChatDelta]):
    """A model that answers conversations (``tasks=("chat",)`` in its spec)."""

    #: What the loaded model can answer with; a model loaded without its speech chain answers
    #: ``("text",)`` only (set it in ``from_pretrained``).
    output_modalities: tuple[Modality, ...] = ("text",)
    #: What the model reads in a user turn (a part of another kind is a 400 naming it, and
    #: ``/v1/realtime`` refuses microphone audio of a model without ``"audio"``); set it in
    #: ``from_pretrained`` when it depends on the checkpoint.
    input_modalities: tuple[PartKind, ...] = ("text", "image", "audio", "video")

    @abstractmethod
    def chat(self, request: GenerationRequest) -> Iterator[ChatDelta]:
        """Yield the answer's deltas; the last one has ``finish_reason`` and ``usage``."""

    def open_stream(self, request: GenerationRequest) -> Iterator[ChatDelta]:
        return self.chat(request)

    def collector(self, started: float | None = None) -> ChatCollector:
        return ChatCollector(started)

    def voices(self) -> list[Voice]:
        """The voices the answer can be spoken in (``GET /v1/audio/voices``)."""
        return []

    def warmup_fields(self) -> dict[str, Any]:
        """A two-token answer to "Hello." in every modality this model answers with."""
        return {
            "messages": [ChatMessage.text("user", "Hello.")],
            "max_tokens": 2,
            "modalities": tuple(self.output_modalities),
        }

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
        for i, message in enumerate(request.messages):
            for j, part in enumerate(message.parts):
                if part.kind not in self.input_modalities:
                    where = f"messages[{i}].content[{j}]"
                    reads = ", ".join(self.input_modalities)
                    raise InvalidRequestError(
                        f"{where}: this model reads {reads}, not {part.kind}", param=where
                    )
        unknown = [m for m in request.modalities if m not in self.output_modalities]
        if unknown or not request.modalities:
            served = ", ".join(self.output_modalities)
            raise InvalidRequestError(
                f"modalities={list(request.modalities)!r}: this model answers with {served}"
                + (" (loaded without its speech chain)" if "audio" in unknown else ""),
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


class AutoregressiveChatPipeline(
    AutoregressivePipeline[ChatDelta, TextStages, TextState, ChatRuntime], ChatPipeline
):
    """A chat pipeline whose requests share the steps of one :class:`ChatRuntime`.

    Implement :meth:`stages` (the text stage, the detokenizer, the speech side) and
    :meth:`prepare` (a validated request -> a :class:`~omni_core.chat.TextState`).
    """

    def make_runtime(self, stages: TextStages, *, max_batch: int, device: Any) -> ChatRuntime:
        return ChatRuntime(stages, max_batch=max_batch, device=device)

    def chat(self, request: GenerationRequest) -> Iterator[ChatDelta]:
        return self.open(request)
