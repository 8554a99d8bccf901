"""The OpenAPI document: request bodies of the routes that parse their bodies by hand (JSON and/or
multipart), so clients, docs and fuzzers (schemathesis) still see what each route takes, and the
error bodies every route may answer with."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel


def body_spec(
    model: type[BaseModel],
    *,
    multipart: bool,
    json_body: bool,
    files: dict[str, bool],
    model_ids: Iterable[str],
) -> dict[str, Any]:
    """``openapi_extra`` of a route: its body as ``model`` (JSON) and/or a form with ``files``
    (name -> several files?). ``model`` is documented as the enum of the served ids."""
    content: dict[str, Any] = {}
    schema = model.model_json_schema()
    schema.pop("$defs", None)
    if "model" in schema.get("properties", {}):
        schema["properties"]["model"] = {
            "type": "string",
            "enum": list(model_ids),
            "description": "A model id from /v1/models.",
        }
    if json_body:
        content["application/json"] = {"schema": schema}
    if multipart:
        props = {
            k: v
            for k, v in schema.get("properties", {}).items()
            if k not in files and "anyOf" not in v
        }
        for name in schema.get("properties", {}):
            if name not in files and name not in props:
                props[name] = {"type": "string"}
        for name, many in files.items():
            binary = {"type": "string", "format": "binary"}
            props[name] = {"type": "array", "items": binary} if many else binary
        required = [r for r in schema.get("required", []) if r in props]
        required += [n for n, many in files.items() if many]
        content["multipart/form-data"] = {
            "schema": {"type": "object", "properties": props, "required": required}
        }
    return {"requestBody": {"required": True, "content": content}}


#: The body of every error (``omni_core.serving.errors.APIError``), OpenAI's shape.
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {
                    "type": "string",
                    "description": "invalid_request_error, authentication_error, "
                    "permission_error, rate_limit_error or server_error",
                },
                "param": {"type": ["string", "null"], "description": "The field at fault."},
                "code": {"type": ["string", "null"], "description": "A stable error code."},
            },
        }
    },
}

#: What each documented status means (sdk-docs/docs/operations.md has the codes).
ERROR_STATUSES: dict[int, str] = {
    400: "Invalid request (a field, a limit, malformed JSON); `param` names the field",
    401: "Missing or wrong API key",
    403: "Cross-origin request refused (a server without an API key)",
    404: "No such model, job or file",
    409: "Cancelled, or not ready yet",
    413: "Body, file or decoded image over its limit",
    415: "Unsupported Content-Type",
    421: "Host header is not this server's (a server bound to loopback)",
    429: "The model's queue is full; retry after Retry-After",
    500: "This request failed inside the model or server; other requests are served",
    503: "Loading, out of memory, storage unavailable or shutting down; retry after Retry-After",
    504: "The request passed the server's request timeout",
    507: "The server's storage is full",
}
_EVERY_ROUTE = (400, 403, 404, 421, 500, 503)
_V1_ROUTE = (401,)
_WRITING_ROUTE = (409, 413, 415, 429, 504, 507)


def document_errors(app: Any) -> None:
    """Document the error bodies on every operation of ``app``'s OpenAPI (FastAPI lists only
    200 and a 422 this server never sends: validation problems are 400s)."""
    base = app.openapi
    done: list[dict[str, Any]] = []

    def openapi() -> dict[str, Any]:
        if done:
            return done[0]
        schema = base()
        schema.setdefault("components", {}).setdefault("schemas", {})["ErrorResponse"] = (
            ERROR_SCHEMA
        )
        ref = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
        for path, item in schema.get("paths", {}).items():
            for method, operation in item.items():
                responses = operation.setdefault("responses", {})
                responses.pop("422", None)
                statuses = list(_EVERY_ROUTE)
                if path.startswith("/v1/"):
                    statuses += _V1_ROUTE
                if method.lower() in ("post", "delete"):
                    statuses += _WRITING_ROUTE
                for status in sorted(statuses):
                    responses.setdefault(
                        str(status), {"description": ERROR_STATUSES[status], "content": ref}
                    )
        done.append(schema)
        return schema

    app.openapi = openapi
