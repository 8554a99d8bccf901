"""The OpenAPI document (``GET /openapi.json``) says what the server does, so that generated
clients and fuzzers (schemathesis) agree with it:

- the request bodies of the routes that parse their bodies by hand (JSON and multipart forms),
  per served model (:mod:`omni_core.serving.openapi_bodies`): limits, enums, each model's
  extras, files as parts of a declared image type;
- what each operation answers with: its content types (images, audio, MP4, server-sent
  events) and the OpenAI-style error body of every status it may send;
- the parameters the routes check by hand (voice names, image file names, model ids) and the
  API key (a bearer token) where the server has one;
- and, outside the document, ``Allow`` on every 405: the methods the path really has
  (Starlette names only those of the first route that matched the path).

The document is built once every model is loaded (the bodies need the pipelines), and until
then from the body models alone.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from omni_core.serving.openapi_fields import IMAGE_TYPES
from omni_core.speech.voices import NAME_PATTERN

log = logging.getLogger("omni.serving")

#: The marker ``body_spec`` leaves on an operation: which body model it parses.
BODY_KEY = "x-omni-body"


def body_spec(
    model: type[BaseModel],
    *,
    multipart: bool,
    json_body: bool,
    files: dict[str, bool],
    model_ids: Iterable[str],
) -> dict[str, Any]:
    """``openapi_extra`` of a route that parses its body by hand: ``model`` as JSON and/or a
    form with ``files`` (name -> several files?). Replaced by each served model's body once
    the models are loaded (:func:`document`); until then ``model`` is the enum of the ids."""
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
    return {"requestBody": {"required": True, "content": content}, BODY_KEY: model.__name__}


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
    405: "Method not allowed on this path (`Allow` lists the methods it has)",
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
_EVERY_ROUTE = (400, 403, 404, 405, 421, 500, 503)
_V1_ROUTE = (401,)
_WRITING_ROUTE = (409, 413, 415, 429, 504, 507)

_BINARY = {"schema": {"type": "string", "format": "binary"}}
_IMAGES = {t: _BINARY for t in ("image/png", "image/jpeg", "image/webp")}
_EVENTS = {"text/event-stream": {"schema": {"type": "string"}}}
#: What an image answer holds (``response_format``: b64_json, url, or the file itself).
IMAGES_RESPONSE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "created": {"type": "integer"},
        "data": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"b64_json": {"type": "string"}, "url": {"type": "string"}},
            },
        },
        "output_format": {"type": "string"},
        "usage": {"type": "object"},
    },
    "required": ["created", "data"],
}
#: The content types of each operation's success (FastAPI says application/json for all).
SUCCESS: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {
    ("post", "/v1/images/generations"): (
        "200",
        {
            "application/json": {"schema": IMAGES_RESPONSE},
            **_IMAGES,
            "application/zip": _BINARY,
        },
    ),
    ("get", "/v1/images/files/{name}"): ("200", _IMAGES),
    ("post", "/v1/videos/sync"): ("200", {"video/mp4": _BINARY}),
    ("get", "/v1/videos/{video_id}/content"): ("200", {"video/mp4": _BINARY}),
    ("post", "/v1/audio/speech"): (
        "200",
        {
            **{t: _BINARY for t in ("audio/wav", "audio/mpeg", "audio/flac", "audio/pcm")},
            **_EVENTS,
        },
    ),
    ("post", "/v1/chat/completions"): (
        "200",
        {"application/json": {"schema": {"type": "object"}}, **_EVENTS},
    ),
    ("get", "/metrics"): ("200", {"text/plain": {"schema": {"type": "string"}}}),
    ("get", "/health"): ("200", {"application/json": {"schema": {"type": "object"}}}),
}
SUCCESS[("post", "/v1/images/edits")] = SUCCESS[("post", "/v1/images/generations")]
SUCCESS[("post", "/v1/audio/generate")] = (
    "200",
    {t: _BINARY for t in ("audio/wav", "audio/mpeg", "audio/flac", "audio/pcm")},
)
# vLLM's liveness probe answers an empty body, with no content type
SUCCESS[("get", "/ping")] = SUCCESS[("post", "/ping")] = ("200", {})


def _responses(path: str, method: str, operation: dict[str, Any]) -> None:
    """The operation's success content types and its error bodies (FastAPI lists only 200
    and a 422 this server never sends: validation problems are 400s)."""
    ref = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
    responses = operation.setdefault("responses", {})
    responses.pop("422", None)
    success = SUCCESS.get((method, path))
    if success is not None:
        status, content = success
        if status in responses or not any(r.startswith("2") for r in responses):
            responses[status] = {
                "description": responses.get(status, {}).get("description", "Success"),
                "content": copy.deepcopy(content),
            }
    if path == "/health":
        responses["503"] = {
            "description": "A model is loading, failed, or the server is stopping",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    statuses = list(_EVERY_ROUTE)
    if path.startswith("/v1/"):
        statuses += _V1_ROUTE
    if method in ("post", "delete"):
        statuses += _WRITING_ROUTE
    for status in sorted(statuses):
        responses.setdefault(str(status), {"description": ERROR_STATUSES[status], "content": ref})


def _parameters(path: str, operation: dict[str, Any], state: Any) -> None:
    """The parameters the routes check by hand, with what they check."""
    ids = list(state.models)
    patterns = {
        ("/v1/audio/voices/{name}", "name"): {"type": "string", "pattern": NAME_PATTERN},
        ("/v1/images/files/{name}", "name"): {
            "type": "string",
            "pattern": "^[0-9a-f]{32}\\.(png|jpeg|webp)$",
        },
        ("/v1/audio/voices", "model"): {"type": "string", "enum": ids},
        ("/v1/models/{model_id}", "model_id"): {"type": "string", "enum": ids},
        ("/v1/videos/{video_id}/content", "variant"): {"type": "string", "enum": ["video"]},
    }
    for parameter in operation.get("parameters", []):
        schema = patterns.get((path, parameter.get("name")))
        if schema is not None:
            parameter["schema"] = {**schema, "title": parameter.get("schema", {}).get("title")}
            parameter["schema"] = {k: v for k, v in parameter["schema"].items() if v is not None}


def _bodies(operation: dict[str, Any], state: Any) -> bool:
    """The operation's request body, per served model; False while a model is not ready."""
    from omni_core.serving import openapi_bodies

    name = operation.pop(BODY_KEY, None)
    if name is None:
        return True
    if any(m.status != "ready" for m in state.models.values()):
        return False
    endpoint = next(e for m, e in openapi_bodies.ENDPOINTS.items() if m.__name__ == name)
    content = operation.get("requestBody", {}).get("content", {})
    for media_type, entry in content.items():
        multipart = media_type != "application/json"
        branches = openapi_bodies.branches(state, endpoint, multipart=multipart)
        entry["schema"] = openapi_bodies.body_schema(branches)
        if multipart:
            files = {
                part: {"contentType": ", ".join(IMAGE_TYPES)}
                for part, prop in entry["schema"].get("properties", {}).items()
                if prop.get("format") == "binary" or prop.get("items", {}).get("format")
            }
            if files:
                entry["encoding"] = files
    return True


def document(app: Any) -> None:
    """Build ``app``'s OpenAPI document as the module docstring says, and answer every 405
    with the path's real ``Allow``."""
    base = app.openapi
    done: list[dict[str, Any]] = []

    def openapi() -> dict[str, Any]:
        if done:
            return done[0]
        state = app.state.omni
        app.openapi_schema = None  # FastAPI's own cache: rebuilt until the bodies are in
        schema = copy.deepcopy(base())
        components = schema.setdefault("components", {})
        components.setdefault("schemas", {})["ErrorResponse"] = ERROR_SCHEMA
        if state.config.api_key:
            components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        complete = True
        if not _uploads_voices(state):  # POST answers 405 then: not a method of this server
            schema.get("paths", {}).get("/v1/audio/voices", {}).pop("post", None)
        if not any("t2a" in m.tasks for m in state.models.values()):
            # no served model makes audio from text: the route answers every body with a 400
            schema.get("paths", {}).pop("/v1/audio/generate", None)
        upload = schema.get("paths", {}).get("/v1/audio/voices", {}).get("post")
        if upload is not None:
            _voice_upload(upload, state)
        for path, item in schema.get("paths", {}).items():
            for method, operation in item.items():
                _responses(path, method, operation)
                _parameters(path, operation, state)
                try:
                    complete &= _bodies(operation, state)
                except Exception:  # the generic body stays; the server serves on
                    log.exception("could not publish the bodies of %s %s", method, path)
                if state.config.api_key and path.startswith("/v1/"):
                    operation["security"] = [{"bearer": []}]
        if complete:
            done.append(schema)
        return schema

    app.openapi = openapi
    app.add_middleware(AllowMiddleware, owner=app)


def _voice_upload(operation: dict[str, Any], state: Any) -> None:
    """``POST /v1/audio/voices``'s form (the route reads it by hand)."""
    from omni_core.serving.openapi_fields import NOT_BLANK, NUL_FREE
    from omni_core.serving.routes.speech.voices import cloning_models
    from omni_core.speech.voices import MAX_VOICE_SECONDS, MIN_VOICE_SECONDS

    text = {"type": "string", "maxLength": 4096, "pattern": NOT_BLANK}
    models = [m for m in cloning_models(state) if m.status == "ready"]
    schema = {
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "pattern": NAME_PATTERN,
                "not": {"enum": sorted({v.id for m in models for v in m.pipeline.voices()})},
                "description": "The voice's id (not one of the models' own voices).",
            },
            "audio": {
                "type": "string",
                "format": "binary",
                "description": f"The reference recording ({MIN_VOICE_SECONDS:g}-"
                f"{MAX_VOICE_SECONDS:g} s; WAV, FLAC, MP3, Ogg, MP4 or WebM).",
            },
            "consent": {
                "type": "string",
                "enum": ["true", "yes"],
                "description": "Required: the speaker agreed to be cloned (their name is taken "
                "too).",
            },
            "transcript": {**text, "description": "What the recording says."},
            "model": {"type": "string", "enum": [m.id for m in models]},
            "language": {"type": "string", "maxLength": 64, "pattern": NUL_FREE},
        },
        "required": ["name", "audio", "consent"],
        "additionalProperties": False,
    }
    operation["requestBody"] = {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": schema,
                "encoding": {"audio": {"contentType": "audio/wav"}},
            }
        },
    }


def _uploads_voices(state: Any) -> bool:
    from omni_core.serving.routes.speech.voices import cloning_models

    return bool(cloning_models(state))


def allowed_methods(app: Any, path: str) -> list[str]:
    """The methods ``path`` has: those the OpenAPI document lists for it (a method a route
    has but this server does not serve, such as voice uploads without a model that clones,
    is not one), else those of every route matching it (HEAD and OPTIONS aside)."""
    from starlette.routing import Match

    scope = {"type": "http", "path": path, "method": "GET", "root_path": ""}
    methods: set[str] = set()
    templates = []
    for route in app.router.routes:
        route_methods = getattr(route, "methods", None)
        if not route_methods:
            continue
        match, _ = route.matches({**scope, "method": next(iter(route_methods))})
        if match == Match.FULL:
            methods |= set(route_methods)
            templates.append(getattr(route, "path_format", path))
    paths = app.openapi().get("paths", {})
    documented = {m.upper() for t in templates for m in paths.get(t, {})}
    return sorted((documented or methods) - {"HEAD", "OPTIONS"})


class AllowMiddleware:
    """A 405's ``Allow`` names every method the path has (Starlette names those of the first
    route that matched the path only: ``/v1/videos`` has GET and POST, on two routes)."""

    def __init__(self, asgi: Any, owner: Any) -> None:
        self.asgi = asgi
        self.owner = owner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.asgi(scope, receive, send)
            return

        async def fixed(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and message["status"] == 405:
                allow = ", ".join(allowed_methods(self.owner, scope["path"]))
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"allow"]
                message = {**message, "headers": [*headers, (b"allow", allow.encode())]}
            await send(message)

        await self.asgi(scope, receive, fixed)


__all__ = ["body_spec", "document"]
