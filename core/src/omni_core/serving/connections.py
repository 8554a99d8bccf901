"""Connections at the socket: how long a client may take to send its headers and its body.

uvicorn bounds idle keep-alive connections (``timeout_keep_alive``) and the number of open
connections (``limit_concurrency``) but not a client that opens a socket and says nothing, nor
one that sends its headers or body a byte at a time (slowloris): each holds a connection, and
enough of them hold ``--max-connections``. :class:`GuardedH11Protocol` adds two deadlines to
uvicorn's h11 protocol:

- **headers**: from the moment a connection opens (or the previous response ended) until the
  request's headers are complete, ``header_timeout_s``;
- **body**: from the end of the headers until the body is complete, ``body_timeout_s``.

A connection past either deadline is closed (an app reading the body sees a disconnect, as when
a client leaves). Requests that arrive at a normal pace never come near them.

It also enforces ``--max-connections`` in uvicorn's place (the same rule as its
``limit_concurrency``) so that a request over the cap gets the OpenAI-style JSON 503 with
``Retry-After`` like every other error, not uvicorn's plain-text one.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from omni_core.serving.config import ServerConfig

#: ``_waiting_for`` of a connection handed to the WebSocket protocol: never re-armed.
_UPGRADED = object()


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the header and body deadlines of the module docstring."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_connections: int | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for: Any = None  # h11.IDLE (headers) or h11.SEND_BODY (body)
        self.limit_concurrency = None  # checked in _capped instead, with a JSON answer
        self._app = self.app
        self.app = self._capped

    async def _capped(self, scope: Any, receive: Any, send: Any) -> None:
        """uvicorn's concurrency rule (open connections, running requests; this request's task
        is counted already) with the JSON 503 of :mod:`omni_core.serving.errors`."""
        cap = self.max_connections
        if cap is not None and (len(self.connections) >= cap or len(self.tasks) > cap):
            from omni_core.serving.errors import APIError

            error = APIError(
                503,
                f"this server holds its limit of {cap} connections (--max-connections); "
                "retry shortly",
                type="server_error",
                code="too_many_connections",
                headers={"Retry-After": "1", "Connection": "close"},
            )
            await error.response()(scope, receive, send)
            return
        await self._app(scope, receive, send)

    def _arm(self, state: Any, seconds: float) -> None:
        self._disarm()
        self._waiting_for = state
        self._deadline = self.loop.call_later(seconds, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = None
        self._waiting_for = None

    def _expire(self) -> None:
        self._deadline = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # the app (if any) sees http.disconnect

    def _follow(self) -> None:
        """Re-arm after input: the headers done -> the body deadline; the body done -> none."""
        state = self.conn.their_state
        if state is self._waiting_for or self._waiting_for is _UPGRADED:
            return
        if state is h11.IDLE:
            self._arm(h11.IDLE, self.header_timeout_s)
        elif state is h11.SEND_BODY:
            self._arm(h11.SEND_BODY, self.body_timeout_s)
        else:
            self._disarm()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(h11.IDLE, self.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self.transport.is_closing():
            self._follow()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        """A WebSocket's connection is the WebSocket protocol's from here: no HTTP deadline
        (the body one would close it mid-session; the stream has its own idle limit)."""
        super().handle_websocket_upgrade(event)
        self._disarm()
        self._waiting_for = _UPGRADED

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._follow()  # keep-alive: the next request's headers are due


def uvicorn_options(config: ServerConfig) -> dict[str, Any]:
    """The ``uvicorn.Config`` keywords of the connection limits of ``config``."""
    protocol = type(
        "OmniH11Protocol",
        (GuardedH11Protocol,),
        {
            "header_timeout_s": config.header_timeout_s,
            "body_timeout_s": config.body_timeout_s,
            "max_connections": config.max_connections,
        },
    )
    return {"http": protocol, "timeout_keep_alive": config.keep_alive_s}
