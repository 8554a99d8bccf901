"""Streamed answers that end so the client can tell whether they finished.

A streamed body that cannot finish (the pipeline failed, the server shut down, an encoder
raised) must not end like one that did. A raw stream (chunked audio) is cut: its body iterator
raises :class:`StreamCut`, and the server closes the connection without the terminating
chunk, so every HTTP client reports an incomplete body (httpx: ``RemoteProtocolError``). A
server-sent-event stream ends with an ``error`` event, as OpenAI's streams do, and then closes
(the openai SDK raises ``APIError`` on it). Either way the server logs one line; uvicorn's
traceback of the cut (:class:`QuietCuts`) and a client that leaves mid-answer
(:class:`~omni_core.serving.errors.ClientGone`) are not errors of the server.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from omni_core.runtime.jobs import describe_failure

log = logging.getLogger("omni.serving")


class StreamCut(Exception):
    """Raised from a streamed body that cannot finish: the connection closes without the
    body's end (what the client sees is an incomplete response, never a complete one)."""


def cut(request_id: str, exc: BaseException) -> StreamCut:
    """Log why the stream of ``request_id`` ends early (one line) and return the exception its
    body iterator raises."""
    log.error(
        "request %s failed mid-stream: %s; the stream is cut (no end of body is sent)",
        request_id,
        describe_failure(exc),
    )
    return StreamCut(f"request {request_id} failed mid-stream: {exc}")


async def cut_on_error(
    chunks: AsyncIterator[bytes], request_id: str
) -> AsyncGenerator[bytes, None]:
    """A raw stream's ``chunks``; any exception while making them (an encoder's) cuts it."""
    try:
        async for chunk in chunks:
            yield chunk
    except StreamCut:
        raise
    except Exception as exc:
        raise cut(request_id, exc) from exc


async def end_with_error_event(
    events: AsyncIterator[bytes], request_id: str, error_event: Callable[[BaseException], bytes]
) -> AsyncGenerator[bytes, None]:
    """An SSE stream's ``events``; an exception while making them becomes its last event
    (``error_event(exc)``), after which the stream closes."""
    try:
        async for event in events:
            yield event
    except Exception as exc:  # noqa: BLE001 - the client must see the stream as failed
        log.error("request %s failed mid-stream: %s", request_id, describe_failure(exc))
        yield error_event(exc)


def _is_cut(exc: BaseException | None) -> bool:
    if isinstance(exc, StreamCut):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_cut(inner) for inner in exc.exceptions)
    return False


class QuietCuts(logging.Filter):
    """Drops uvicorn's "Exception in ASGI application" traceback of a :class:`StreamCut`: the
    cut is deliberate and :func:`cut` logged it already (installed on ``uvicorn.error`` while
    the server runs)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not _is_cut(exc)


__all__ = ["QuietCuts", "StreamCut", "cut", "cut_on_error", "end_with_error_event"]
