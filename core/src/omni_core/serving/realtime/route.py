"""``GET /v1/realtime?model=NAME``: the WebSocket of OpenAI's Realtime API (the official
client's ``client.realtime.connect(model=...)`` turns ``http://host/v1`` into this URL).

The upgrade passes the HTTP checks first (the Host / Origin guard, then the API key from
``Authorization: Bearer``); a refused one gets an ``error`` event and the socket closes (1008).
Then ``session.created``, and events both ways until the client leaves or a limit ends the
session: ``--realtime-max-sessions`` open at once, and per session ``realtime_max_s`` seconds,
``realtime_idle_s`` seconds without a client event, ``realtime_max_audio_bytes`` of input audio
and ``realtime_max_turns`` user turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from fastapi import FastAPI, WebSocket, WebSocketDisconnect

from omni_core.serving.errors import APIError, from_exception
from omni_core.serving.guards import bearer_ok, websocket_refusal
from omni_core.serving.models import pick
from omni_core.serving.realtime.events import EventError, error_event
from omni_core.serving.state import ServerState

log = logging.getLogger("omni.serving")

PATH = "/v1/realtime"
#: Characters of one client event at most (OpenAI's append limit is 15 MiB of base64).
MAX_EVENT_CHARS = 16 * 1024 * 1024


class _End(Exception):
    """Ends the session after its error event."""

    def __init__(self, message: str, code: str, close_code: int = 1000) -> None:
        super().__init__(message)
        self.code, self.close_code = code, close_code


def _parse(message: dict[str, Any]) -> dict[str, Any]:
    raw = message.get("text")
    if raw is None:
        raise EventError("send JSON text messages, not binary ones", "invalid_event")
    if len(raw) > MAX_EVENT_CHARS:
        raise EventError(f"an event of more than {MAX_EVENT_CHARS} characters", "event_too_large")
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise EventError(f"malformed JSON event: {exc}", "invalid_json") from None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise EventError('each event is a JSON object with a "type"', "invalid_event", "type")
    return data


def add_websocket(app: FastAPI, state: ServerState) -> None:
    """The route, on the app (the ``/v1`` router's key check reads HTTP requests only)."""
    from omni_core.serving.realtime.connection import Connection

    open_sessions: set[int] = set()

    @app.websocket(PATH)
    async def realtime(websocket: WebSocket) -> None:
        config = state.config
        refusal = websocket_refusal(websocket.scope, config)
        await websocket.accept()
        lock = asyncio.Lock()

        async def send(event: dict[str, Any]) -> None:
            async with lock:
                await websocket.send_text(json.dumps(event))

        connection: Connection | None = None
        mine = id(websocket)
        try:
            if refusal is not None:
                raise _End(refusal.message, refusal.code or "forbidden", 1008)
            if not bearer_ok(websocket.headers, config):
                raise _End(
                    "missing or invalid API key: send 'Authorization: Bearer KEY'",
                    "invalid_api_key",
                    1008,
                )
            if len(open_sessions) >= config.realtime_max_sessions:
                raise _End(
                    f"this server holds {config.realtime_max_sessions} realtime sessions "
                    "at once (--realtime-max-sessions); try again later",
                    "too_many_sessions",
                    1013,
                )
            try:
                served = pick(state.models, websocket.query_params.get("model"), "chat")
            except APIError as exc:
                raise _End(exc.message, exc.code or "invalid_model", 1008) from None
            open_sessions.add(mine)
            connection = Connection(state, served, send)
            try:
                await connection.start()
            except EventError as exc:
                raise _End(str(exc), exc.code) from None
            await _serve(websocket, connection, send)
        except _End as exc:
            with contextlib.suppress(Exception):
                await send(error_event(str(exc), exc.code, None, None))
                await websocket.close(exc.close_code)
        except WebSocketDisconnect:
            log.info("realtime: the client disconnected")
        finally:
            open_sessions.discard(mine)
            if connection is not None:
                await connection.close()


async def _serve(websocket: WebSocket, connection: Any, send: Any) -> None:
    """Read and handle events until the client leaves or a limit ends the session."""
    config = connection.state.config
    while True:
        left = connection.session.remaining_s()
        if left <= 0:
            raise _End(
                f"the session ran past {config.realtime_max_s:g} s (the session limit)",
                "session_expired",
            )
        try:
            message = await asyncio.wait_for(websocket.receive(), min(config.realtime_idle_s, left))
        except TimeoutError:
            if connection.session.remaining_s() <= 0:
                continue  # said at the top of the loop
            raise _End(
                f"no client event for {config.realtime_idle_s:g} s (the idle limit)", "idle_timeout"
            ) from None
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        client_event_id = None
        try:
            data = _parse(message)
            client_event_id = data.get("event_id")
            await connection.handle(data)
        except EventError as exc:
            if exc.fatal:  # a session limit: said once, then the session ends
                raise _End(str(exc), exc.code) from None
            await send(error_event(str(exc), exc.code, exc.param, client_event_id))
        except APIError as exc:  # what the request builder refused (a 400 over HTTP)
            await send(
                error_event(exc.message, exc.code or "invalid_request", exc.param, client_event_id)
            )
        except (WebSocketDisconnect, _End):
            raise
        except Exception as exc:  # a bug in one event does not end the session
            log.exception("realtime: handling %s failed", message.get("text", "")[:80])
            api = from_exception(exc)
            await send(error_event(api.message, api.code or "server_error", None, client_event_id))
