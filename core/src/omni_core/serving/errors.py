"""OpenAI-style error bodies: every failure the client can act on is a 4xx with a clear message.

The body is always ``{"error": {"message", "type", "param", "code"}}``. Validation problems
(malformed JSON, a bad size, an unknown model) are raised before any compute and never become a
500; a failure inside one generation fails only that request.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from omni_core.engine import (
    EngineStoppedError,
    QueueFullError,
    RequestCancelledError,
    RequestFailedError,
    RequestTimeoutError,
)
from omni_core.errors import InvalidRequestError, OmniError

log = logging.getLogger("omni.serving")


class APIError(Exception):
    """An error with its HTTP status and OpenAI-style fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def invalid(message: str, param: str | None = None, code: str = "invalid_value") -> APIError:
    return APIError(400, message, param=param, code=code)


def from_validation_error(exc: ValidationError | RequestValidationError) -> APIError:
    """The first problem of a pydantic error, named by its field."""
    errors = exc.errors()
    if not errors:
        return invalid("invalid request body")
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body",)]
    param = ".".join(loc) or None
    kind = first.get("type", "")
    if kind in ("json_invalid", "json_type"):
        return APIError(400, f"malformed JSON body: {first.get('msg')}", code="invalid_json")
    if kind == "missing":
        return APIError(
            400,
            f"missing required parameter: {param}",
            param=param,
            code="missing_required_parameter",
        )
    if kind == "extra_forbidden":
        return APIError(400, f"unknown parameter: {param}", param=param, code="unknown_parameter")
    message = first.get("msg", "invalid value")
    return APIError(
        400, f"{param}: {message}" if param else message, param=param, code="invalid_value"
    )


def from_exception(exc: BaseException) -> APIError:
    """Map engine and omni errors to HTTP; anything else is a clear 500 for this request only."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, InvalidRequestError):
        return APIError(400, exc.message, param=exc.param, code=exc.code or "invalid_value")
    if isinstance(exc, QueueFullError):
        return APIError(
            429,
            str(exc),
            type="rate_limit_error",
            code=exc.code,
            headers={"Retry-After": str(int(max(1, round(exc.retry_after))))},
        )
    if isinstance(exc, EngineStoppedError):
        return APIError(
            503, str(exc), type="server_error", code=exc.code, headers={"Retry-After": "5"}
        )
    if isinstance(exc, RequestCancelledError):
        return APIError(409, str(exc), code=exc.code)
    if isinstance(exc, RequestTimeoutError):
        return APIError(504, str(exc), type="server_error", code=exc.code)
    if isinstance(exc, RequestFailedError):
        return APIError(500, f"generation failed: {exc}", type="server_error", code=exc.code)
    if isinstance(exc, OmniError):
        return APIError(400, str(exc), code=type(exc).__name__)
    log.error("unexpected error", exc_info=exc)
    return APIError(
        500,
        f"internal error: {type(exc).__name__}: {exc}",
        type="server_error",
        code="internal_error",
    )


_STATUS_CODES = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", "forbidden"),
    404: ("invalid_request_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    413: ("invalid_request_error", "request_too_large"),
    415: ("invalid_request_error", "unsupported_media_type"),
}


def install_handlers(app: FastAPI) -> None:
    """Route every error through :class:`APIError` so bodies are uniform."""

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return from_validation_error(exc).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind, code = _STATUS_CODES.get(exc.status_code, ("invalid_request_error", None))
        if exc.status_code >= 500:
            kind = "server_error"
        return APIError(
            exc.status_code, str(exc.detail), type=kind, code=code, headers=dict(exc.headers or {})
        ).response()

    @app.exception_handler(Exception)
    async def _any(_: Request, exc: Exception) -> JSONResponse:
        return from_exception(exc).response()
