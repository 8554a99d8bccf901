"""The system routes: ``/v1/models`` (behind the API key), ``/health`` and ``/metrics`` (open,
for load balancers and scrapers)."""

from __future__ import annotations

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
    @app.get("/health", summary="200 once every model is loaded and warmed, 503 before")
    async def health() -> JSONResponse:
        # A parallel model whose worker process died turns failed here: /health says why.
        ready = all([m.check_health() for m in state.models.values()]) and not state.stopping
        models = {m.id: m.status for m in state.models.values()}
        body: dict[str, Any] = {"status": "ok" if ready else "unavailable", "models": models}
        errors = {m.id: m.error for m in state.models.values() if m.error}
        if errors:
            body["errors"] = errors
        return JSONResponse(
            body, status_code=200 if ready else 503, headers={} if ready else {"Retry-After": "5"}
        )

    @app.get("/metrics", summary="Prometheus metrics")
    async def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
