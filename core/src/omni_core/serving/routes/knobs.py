"""``GET /v1/models/{id}/knobs``: what a client may set on one served model
(:mod:`omni_core.serving.knobs`); behind the API key like ``/v1/models``. Registered before
:mod:`.system`, whose ``/v1/models/{id}`` takes any path: a served model whose id itself ends
in ``/knobs`` (``acme/knobs``) is still described at ``/v1/models/acme/knobs`` unless ``acme`` is
served too (then ``/v1/models/acme/knobs/knobs`` gives its knobs either way)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from omni_core.serving import knobs
from omni_core.serving.errors import APIError
from omni_core.serving.state import ServerState


def add_routes(router: APIRouter, state: ServerState) -> None:
    @router.get("/models/{model_id:path}/knobs", summary="A served model's own request fields")
    async def model_knobs(model_id: str) -> dict[str, Any]:
        served = state.models.get(model_id)
        whole = state.models.get(f"{model_id}/knobs")
        if served is None and whole is not None:  # GET /v1/models/{id} of an id ending in /knobs
            return whole.describe()
        if served is None:
            raise APIError(
                404,
                f"the model {model_id!r} does not exist on this server",
                param="model",
                code="model_not_found",
            )
        if served.status != "ready":
            raise APIError(
                503,
                f"model {model_id!r} is {served.status}",
                type="server_error",
                code="model_loading" if served.status == "loading" else "model_unavailable",
                headers={"Retry-After": "5"} if served.status == "loading" else {},
            )
        return knobs.describe(served, state.config)
