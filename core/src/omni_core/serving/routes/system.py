"""The system routes: ``/v1/models`` (behind the API key), ``/health``, ``/ping``, ``/version``
and ``/metrics`` (open, for load balancers and scrapers). ``/ping`` and ``/version`` answer as
vLLM's (and so vLLM-Omni's) do: ``/ping`` (GET or POST) is an empty 200 when ``/health`` is,
else 503; ``/version`` is ``{"version": ...}``, omni-core's."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse, Response

from omni_core.serving.errors import APIError
from omni_core.serving.state import ServerState


def add_routes(router: APIRouter, state: ServerState) -> None:
    @router.get("/models", summary="List the served models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [m.describe() for m in state.models.values()]}

    @router.get("/models/{model_id:path}", summary="Describe one served model")
    async def get_model(model_id: str) -> dict[str, Any]:
        served = state.models.get(model_id)
        if served is None:
            raise APIError(
                404,
                f"the model {model_id!r} does not exist on this server",
                param="model",
                code="model_not_found",
            )
        return served.describe()


def add_open_routes(app: FastAPI, state: ServerState) -> None:
    def check() -> tuple[bool, dict[str, Any]]:
        """Ready, and the body of ``/health``: every model loaded and warmed (a parallel model
        whose worker died turns failed here), not stopping, the state folder writable."""
        ready = all([m.check_health() for m in state.models.values()]) and not state.stopping
        body: dict[str, Any] = {"models": {m.id: m.status for m in state.models.values()}}
        errors = {m.id: m.error for m in state.models.values() if m.error}
        if errors:
            body["errors"] = errors
        problem = state.storage_problem()
        if problem is not None:
            ready = False
            body["storage"] = problem
        return ready, {"status": "ok" if ready else "unavailable", **body}

    @app.get("/health", summary="200 once every model is loaded and warmed, 503 before")
    async def health() -> JSONResponse:
        ready, body = await asyncio.to_thread(check)
        return JSONResponse(
            body, status_code=200 if ready else 503, headers={} if ready else {"Retry-After": "5"}
        )

    async def ping() -> Response:
        ready, _ = await asyncio.to_thread(check)
        return Response(status_code=200 if ready else 503)

    # one route per method: a shared route would give both the same OpenAPI operation id
    for method in ("get", "post"):
        app.add_api_route(
            "/ping",
            ping,
            methods=[method.upper()],
            operation_id=f"ping_{method}",
            summary="vLLM's liveness probe: /health's code",
        )

    @app.get("/version", summary="The server's version (omni-core's), as vLLM answers it")
    async def version() -> dict[str, str]:
        from omni_core import __version__

        return {"version": __version__}

    @app.get("/metrics", summary="Prometheus metrics")
    async def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
