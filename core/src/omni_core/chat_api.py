"""``Omni(...).chat(...)`` and ``Omni(...).chat_stream(...)``: a conversation in, the answer
(text, and speech from omni models) out; and :func:`chat_request`, the one way a chat request
is built (the Python API, ``omni generate chat`` and the server's warm-up).

``messages`` is a string (one user turn) or a list of :class:`~omni_core.chat.ChatMessage`
objects or ``{"role", "content"}`` dicts whose content is a string or a list of parts:
strings, PIL images or :class:`~omni_core.chat.ChatPart` objects (decoded audio and video).
"""

from __future__ import annotations

import collections.abc
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from omni_core.chat.pipeline import AutoregressiveChatPipeline, ChatPipeline
from omni_core.chat.types import ChatDelta, ChatMessage, ChatPart
from omni_core.errors import InvalidRequestError
from omni_core.requests import build_request

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.api import Omni
    from omni_core.pipelines.base import GenerationRequest, GenerationResult, Pipeline
    from omni_core.requests import RequestLimits

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
        if isinstance(pipeline, AutoregressiveChatPipeline):
            from omni_core.autoregressive.chat_runtime import ChatStream

            if isinstance(stream, ChatStream):
                stream.close()
        if isinstance(stream, collections.abc.Generator):
            stream.close()


def chat_stream(
    omni: Omni, messages: str | Sequence[MessageLike], **kwargs: Any
) -> Iterator[ChatDelta]:
    """Yield the answer's deltas as they are made (text pieces, audio pieces, then a last one
    with ``finish_reason`` and ``usage``). Keywords: the shared fields of
    :func:`chat_request` by name, ``request_id``, the rest extras of the pipeline."""
    from omni_core.requests import split_keywords

    request_id = kwargs.pop("request_id", None)
    shared, extras = split_keywords(kwargs)
    request = chat_request(omni.pipeline, messages, extras=extras, request_id=request_id, **shared)
    assert isinstance(omni.pipeline, ChatPipeline)
    return _stream(omni.pipeline, request)


def chat(omni: Omni, messages: str | Sequence[MessageLike], **kwargs: Any) -> GenerationResult:
    """The whole answer: ``text``, ``audio`` (with ``modalities=["text", "audio"]``) at
    ``sample_rate``, ``info["finish_reason"]``, ``info["usage"]`` and timings."""
    from omni_core.engine.collect import ChatCollector

    collector = ChatCollector()
    for delta in chat_stream(omni, messages, **kwargs):
        collector.add(delta)
    result = collector.result()
    result.timings["load_s"] = omni.load_s
    return result


__all__ = ["MessageLike", "as_messages", "chat", "chat_request", "chat_stream"]
