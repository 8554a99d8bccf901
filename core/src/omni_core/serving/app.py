"""The OpenAI-compatible HTTP server: FastAPI routes in front of one engine per model.

This module only assembles the app; the parts live by job:

- :mod:`~omni_core.serving.config` — ``ServerConfig``, ``ModelSource``
- :mod:`~omni_core.serving.state` — what the routes share, startup and shutdown
- :mod:`~omni_core.serving.models` — loading, warm-up, health of the served models; ``pick``
- :mod:`~omni_core.serving.jobs` — the video-job state machine (persisted, resumed on restart)
- :mod:`~omni_core.serving.http` — reading bodies, forms and uploads with limits
- :mod:`~omni_core.serving.connections` — header and body deadlines at the socket
- :mod:`~omni_core.serving.guards` — Host and cross-origin checks (drive-by use from web pages)
- :mod:`~omni_core.serving.openapi` — the OpenAPI document (each served model's bodies) and
  ``Allow`` on 405s
- :mod:`~omni_core.serving.routes` — one module per resource, in folders that mirror the
  lanes: ``diffusion`` (images, videos, image models' chat answers), ``speech`` (speech,
  voices), ``chat`` (the chat completions route, chat models' answers), and ``system``
- :mod:`~omni_core.serving.streams` — streamed answers that end so the client can tell
- :mod:`~omni_core.serving.compat` — other servers' request fields mapped onto omni's
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, FastAPI, Request

from omni_core.contract.errors import EngineStoppedError
from omni_core.serving.config import ModelSource, ServerConfig
from omni_core.serving.errors import APIError, from_exception, install_handlers
from omni_core.serving.guards import BrowserGuardMiddleware
from omni_core.serving.metrics import MetricsMiddleware
from omni_core.serving.openapi import document
from omni_core.serving.playground import add_playground
from omni_core.serving.realtime import route as realtime_route
from omni_core.serving.routes import knobs, system
from omni_core.serving.routes.chat import completions
from omni_core.serving.routes.diffusion import audio, images, videos
from omni_core.serving.routes.speech import speech, stream, voices
from omni_core.serving.state import ServerState
from omni_core.serving.streams import QuietCuts

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.api import Omni


class DrainMiddleware:
    """Once the server stops (SIGTERM), every new request gets 503 with ``Retry-After`` at once.

    Why: the socket stays open while running work finishes (``omni serve`` drains before uvicorn
    closes it), so clients get an answer they can retry on, not a refused connection; requests
    already in flight, streams included, are past this check and finish.
    """

    def __init__(self, app: Any, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.state.stopping:
            await self.app(scope, receive, send)
            return
        error = from_exception(EngineStoppedError("the server is shutting down; retry shortly"))
        error.headers["Connection"] = "close"  # the next try opens a connection to whoever is up
        await error.response()(scope, receive, send)


def create_app(config: ServerConfig, *, preloaded: Mapping[str, Omni] | None = None) -> FastAPI:
    """Build the FastAPI app; ``preloaded`` maps model ids to ready :class:`Omni` objects."""
    from omni_core import __version__

    state = ServerState(config, preloaded)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        quiet = QuietCuts()  # a cut stream is logged once, by omni (serving.streams)
        logging.getLogger("uvicorn.error").addFilter(quiet)
        state.start()
        try:
            yield
        finally:
            await asyncio.to_thread(state.shutdown)
            logging.getLogger("uvicorn.error").removeFilter(quiet)

    app = FastAPI(
        title="omni",
        version=__version__,
        lifespan=lifespan,
        description="OpenAI-compatible image, video and speech generation.",
    )
    app.state.omni = state
    install_handlers(app)
    app.add_middleware(DrainMiddleware, state=state)
    app.add_middleware(BrowserGuardMiddleware, config=config)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)

    async def require_key(request: Request) -> None:
        key = config.api_key
        if not key:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), key.encode()
        ):
            raise APIError(
                401,
                "missing or invalid API key: send 'Authorization: Bearer KEY'",
                type="authentication_error",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(require_key)])
    for routes in (images, videos, audio, speech, voices, completions, knobs, system):
        routes.add_routes(v1, state)
    app.include_router(v1)
    stream.add_websocket(app, state)
    realtime_route.add_websocket(app, state)
    system.add_open_routes(app, state)
    if config.playground:
        add_playground(app)
    document(app)
    return app


def serve_draining(app: FastAPI, **options: Any) -> None:
    """Run ``app`` on uvicorn (``options``: ``uvicorn.Config``'s, over the connection limits of
    the config, :func:`~omni_core.serving.connections.uvicorn_options`), draining on SIGTERM.

    Why not plain ``uvicorn.run``: on SIGTERM uvicorn closes the socket first (new clients get
    connection refused) and lets queued work start while it waits. Here the first SIGTERM or
    SIGINT stops admissions (503, see :class:`DrainMiddleware`) and lets running work finish
    within ``shutdown_grace_s`` (:meth:`ServerState.drain`) with the socket open; then uvicorn
    sends what is left and exits. A second signal exits at once.
    """
    import threading

    import uvicorn

    state: ServerState = app.state.omni

    class DrainingServer(uvicorn.Server):
        draining = False

        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.draining:
                super().handle_exit(sig, frame)
                self.force_exit = True
                return
            self.draining = True
            self._captured_signals.append(sig)  # re-raised on exit, as uvicorn does
            state.stopping = True  # admissions stop now, before the thread runs
            threading.Thread(target=self._drain, name="omni-drain", daemon=True).start()

        def _drain(self) -> None:
            try:
                state.drain()
            finally:
                self.should_exit = True

    from omni_core.serving.connections import uvicorn_options

    options.setdefault("timeout_graceful_shutdown", 5)  # after the drain: only replies to send
    options = {**uvicorn_options(state.config), **options}
    DrainingServer(uvicorn.Config(app, **options)).run()


__all__ = ["ModelSource", "ServerConfig", "ServerState", "create_app"]
