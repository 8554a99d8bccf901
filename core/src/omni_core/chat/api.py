"""What ``Omni(...).chat(...)`` and ``Omni(...).chat_stream(...)`` run: a conversation in, the
answer (text, and speech from omni models) out, for any loaded pipeline; and :func:`chat_request`,
the one way a chat request is built (the Python API, ``omni generate chat`` and the server's
warm-up).

``messages`` is a string (one user turn) or a list of :class:`~omni_core.chat.ChatMessage`
objects or ``{"role", "content"}`` dicts whose content is a string or a list of parts:
strings, PIL images or :class:`~omni_core.chat.ChatPart` objects (decoded audio and video).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from omni_core.chat.pipeline import ChatPipeline
from omni_core.contract.collect import ChatCollector
from omni_core.contract.errors import InvalidRequestError
from omni_core.contract.messages import ChatDelta, ChatMessage, ChatPart
from omni_core.contract.pipeline import Pipeline, close_stream
from omni_core.contract.requests import build_request, split_keywords
from omni_core.contract.types import GenerationRequest, GenerationResult

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.requests import RequestLimits

#: What a message may be given as.
MessageLike = ChatMessage | Mapping[str, Any] | str
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


def _part(value: Any, at: str) -> ChatPart:
    if isinstance(value, ChatPart):
        return value
    if isinstance(value, str):
        return ChatPart(kind="text", text=value)
    from PIL import Image

    if isinstance(value, Image.Image):
        return ChatPart(kind="image", image=value.convert("RGB"))
    raise InvalidRequestError(
        f"{at}: expected a string, a PIL image or a ChatPart, got {type(value).__name__}",
        param=at,
    )


def as_messages(messages: str | Sequence[MessageLike]) -> list[ChatMessage]:
    """Any of the accepted forms -> ChatMessage objects (InvalidRequestError naming the item)."""
    if isinstance(messages, str):
        return [ChatMessage.text("user", messages)]
    out: list[ChatMessage] = []
    for i, message in enumerate(messages):
        at = f"messages[{i}]"
        if isinstance(message, ChatMessage):
            out.append(message)
        elif isinstance(message, str):
            out.append(ChatMessage.text("user", message))
        elif isinstance(message, Mapping) and message.get("role") in _ROLES:
            content = message.get("content")
            items = content if isinstance(content, list | tuple) else [content]
            parts = [_part(p, f"{at}.content[{j}]") for j, p in enumerate(items)]
            out.append(ChatMessage(role=_ROLES[message["role"]], parts=parts))  # type: ignore[arg-type]
        else:
            raise InvalidRequestError(
                f"{at}: expected a ChatMessage, a string or a dict with role system, user or "
                "assistant and its content",
                param=at,
            )
    return out


def chat_request(
    pipeline: Pipeline,
    messages: str | Sequence[MessageLike],
    *,
    extras: Mapping[str, Any] | None = None,
    request_id: str | None = None,
    limits: RequestLimits | None = None,
    extras_at: str | None = "extras",
    **fields: Any,
) -> GenerationRequest:
    """A validated chat request for ``pipeline``: ``fields`` are shared request fields
    (``modalities``, ``voice``, ``max_tokens``, ``temperature``, ``top_p``, ``top_k``,
    ``seed``); a pipeline that does not chat is an InvalidRequestError."""
    if not isinstance(pipeline, ChatPipeline):
        raise InvalidRequestError(
            f"{type(pipeline).__name__} does not answer conversations (not a chat model)",
            param="model",
        )
    fields = {k: v for k, v in fields.items() if v is not None}
    if "modalities" in fields:
        fields["modalities"] = tuple(fields["modalities"])
    return build_request(
        pipeline,
        {**fields, "messages": as_messages(messages)},
        extras=extras,
        request_id=request_id,
        limits=limits,
        extras_at=extras_at,
    )


def _stream(pipeline: ChatPipeline, request: GenerationRequest) -> Iterator[ChatDelta]:
    stream = pipeline.chat(request)
    try:
        yield from stream
    finally:  # a consumer that stops early frees the request's place at once
        close_stream(stream)


def chat_stream(
    pipeline: Pipeline, messages: str | Sequence[MessageLike], **kwargs: Any
) -> Iterator[ChatDelta]:
    """Yield the answer's deltas as they are made (text pieces, audio pieces, then a last one
    with ``finish_reason`` and ``usage``). Keywords: the shared fields of
    :func:`chat_request` by name, ``request_id``, the rest extras of the pipeline."""
    request_id = kwargs.pop("request_id", None)
    kwargs.setdefault("stream", True)  # read as it is made: pipelines may decode smaller chunks
    shared, extras = split_keywords(kwargs)
    request = chat_request(pipeline, messages, extras=extras, request_id=request_id, **shared)
    assert isinstance(pipeline, ChatPipeline)
    return _stream(pipeline, request)


def chat(
    pipeline: Pipeline, messages: str | Sequence[MessageLike], **kwargs: Any
) -> GenerationResult:
    """The whole answer: ``text``, ``audio`` (with ``modalities=["text", "audio"]``) at
    ``sample_rate``, ``info["finish_reason"]``, ``info["usage"]`` and timings."""
    collector = ChatCollector()
    for delta in chat_stream(pipeline, messages, **{"stream": False, **kwargs}):
        collector.add(delta)
    return collector.result()


__all__ = ["MessageLike", "as_messages", "chat", "chat_request", "chat_stream"]
