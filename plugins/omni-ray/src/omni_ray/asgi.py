"""Carrying one HTTP request from the ingress to a replica's omni app and its response back,
message by message (so a streamed speech response stays streamed across the hop).

A request crosses Ray as a plain dict (:func:`pack`); the replica runs it through its own
FastAPI app (the core's, unchanged) with :func:`call_app`, an async generator of the ASGI
``http.response.*`` messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

#: ASGI messages of a response.
Message = dict[str, Any]


def pack(scope: dict[str, Any], body: bytes) -> dict[str, Any]:
    """The parts of an ASGI HTTP ``scope`` (and its body) a replica needs, picklable."""
    return {
        "method": scope["method"],
        "path": scope["path"],
        "query_string": scope.get("query_string", b""),
        "headers": [(bytes(k), bytes(v)) for k, v in scope.get("headers", [])],
        "client": tuple(scope["client"]) if scope.get("client") else None,
        "scheme": scope.get("scheme", "http"),
        "server": tuple(scope["server"]) if scope.get("server") else None,
        "body": body,
    }


def unpack(request: dict[str, Any]) -> dict[str, Any]:
    """The ASGI scope of a :func:`pack` ed request."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": request["method"],
        "scheme": request["scheme"],
        "path": request["path"],
        "raw_path": request["path"].encode(),
        "query_string": request["query_string"],
        "root_path": "",
        "headers": request["headers"],
        "client": request["client"],
        "server": request["server"],
        "state": {},
    }


async def call_app(app: Any, request: dict[str, Any]) -> AsyncIterator[Message]:
    """Run ``request`` through the ASGI ``app``; yields its ``http.response.start`` and
    ``http.response.body`` messages as the app sends them."""
    queue: asyncio.Queue[Message | None] = asyncio.Queue()
    sent_body = False
    finished = asyncio.Event()

    async def receive() -> Message:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": request["body"], "more_body": False}
        await finished.wait()  # the response is complete (or the caller went away)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        await queue.put(message)

    async def run() -> None:
        try:
            await app(unpack(request), receive, send)
        finally:
            await queue.put(None)

    task = asyncio.create_task(run())
    try:
        while (message := await queue.get()) is not None:
            yield message
            if message["type"] == "http.response.body" and not message.get("more_body"):
                break
    finally:
        finished.set()
        if not task.done():
            await asyncio.wait({task}, timeout=5)
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


async def read_body(receive: Any, limit: int) -> bytes | None:
    """The whole request body, or None once it passes ``limit`` bytes."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def header(scope_or_request: dict[str, Any], name: bytes) -> str:
    for key, value in scope_or_request.get("headers", []):
        if bytes(key).lower() == name:
            return bytes(value).decode("latin-1")
    return ""
