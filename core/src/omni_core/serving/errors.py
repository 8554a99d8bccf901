"""OpenAI-style error bodies: every failure the client can act on is a 4xx with a clear message.

The body is always ``{"error": {"message", "type", "param", "code"}}``. Validation problems
(malformed JSON, a bad size, an unknown model) are raised before any compute and never become a
500; a failure inside one generation fails only that request.
"""

from __future__ import annotations

import errno
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from omni_core.contract.errors import (
    EngineStoppedError,
    InvalidRequestError,
    OmniError,
    QueueFullError,
    RequestCancelledError,
    RequestFailedError,
    RequestOutOfMemoryError,
    RequestTimeoutError,
)

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


class ClientGone(Exception):
    """The client closed its connection before its answer: the route stops (its job was
    cancelled) and nobody reads what it returns. Not a server error: logged at info."""


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
    if isinstance(exc, RequestOutOfMemoryError | MemoryError):
        return APIError(
            503,
            f"{exc or 'out of memory'}; this request failed alone, the server keeps serving "
            "(limits: sdk-docs operations page, --max-pixels/--max-frames/--max-batch)",
            type="server_error",
            code="out_of_memory",
            headers={"Retry-After": "5"},
        )
    if isinstance(exc, RequestFailedError):
        return APIError(500, f"generation failed: {exc}", type="server_error", code=exc.code)
    if isinstance(exc, OmniError):
        return APIError(400, str(exc), code=type(exc).__name__)
    if isinstance(exc, OSError):
        return storage_error(exc)
    log.error("unexpected error", exc_info=exc)
    return APIError(
        500,
        f"internal error: {type(exc).__name__}: {exc}",
        type="server_error",
        code="internal_error",
    )


#: errno values that mean "the disk is full" (507) rather than "not writable" (503).
_FULL = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG})


def storage_error(exc: OSError) -> APIError:
    """A failure to read or write the state dir: 507 when full, else 503, and never the path
    (``strerror`` only: server paths are not the client's business)."""
    reason = exc.strerror or type(exc).__name__
    log.error("storage error", exc_info=exc)
    if exc.errno in _FULL:
        return APIError(
            507,
            f"the server's storage is full ({reason}); retry later",
            type="server_error",
            code="insufficient_storage",
        )
    return APIError(
        503,
        f"the server cannot write its files ({reason}); retry later",
        type="server_error",
        code="storage_unavailable",
        headers={"Retry-After": "30"},
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

    @app.exception_handler(ClientGone)
    async def _gone(request: Request, exc: ClientGone) -> Response:
        log.info("%s %s: %s", request.method, request.url.path, exc)
        return Response(status_code=499)  # nginx's "client closed request"; never delivered

    @app.exception_handler(Exception)
    async def _any(_: Request, exc: Exception) -> JSONResponse:
        return from_exception(exc).response()

    app.add_middleware(CatchAllMiddleware)


class CatchAllMiddleware:
    """Answers an exception no route handled with its JSON error and does not re-raise it.

    Starlette's own last-resort handler sends the 500 and then re-raises, and uvicorn closes the
    connection: the client's next request on that keep-alive connection fails. Here the error is
    logged and answered, and the connection stays usable. An exception after the response
    started cannot be answered any more: it propagates (the connection must close then),
    except the client's own disconnect (a stream it stopped reading), which ends the request
    quietly: nobody is left to answer, and the server did nothing wrong.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except ClientDisconnect:
            log.info("%s %s: the client disconnected", scope.get("method"), scope.get("path"))
            return
        except Exception as exc:
            if started:
                raise
            await from_exception(exc).response()(scope, receive, send)
