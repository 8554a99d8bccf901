"""Drive-by use from web pages: requests a browser sends on a page's behalf are refused.

Two ways a page the user merely visits could use an ``omni serve`` on their machine:

- **DNS rebinding**: the page's own host name is re-pointed at 127.0.0.1, so the browser treats
  the server as same-origin and the page can read the answers. The ``Host`` header still names
  the page's host, so a server bound to loopback answers only requests whose ``Host`` is a
  loopback name (``localhost``, ``127.0.0.1``, ``[::1]``) or the host of ``--public-url``: 421
  ``invalid_host`` otherwise (``ServerConfig.loopback_host_check=False`` turns it off for an
  app that another server runs on another address, e.g. behind Ray Serve's proxy).
- **Cross-origin form POSTs**: a form (or ``fetch`` with ``mode: no-cors``) can POST
  ``multipart/form-data`` anywhere without a CORS preflight. JSON routes already refuse any
  other ``Content-Type`` (415); on a server without an API key every state-changing request
  whose ``Origin`` is not the server's own, or whose ``Sec-Fetch-Site`` says another site sent
  it, is 403 ``cross_origin_request``. Clients that are not browsers (the openai SDK, curl,
  httpx) send neither header and are not affected. A server with ``--api-key`` is protected by
  the key (a browser cannot add it cross-origin).
"""

from __future__ import annotations

import hmac
from typing import Any
from urllib.parse import urlsplit

from omni_core.serving.config import ServerConfig
from omni_core.serving.errors import APIError

LOOPBACK_BINDS = frozenset({"127.0.0.1", "localhost", "::1"})
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
#: Methods that change state; GET/HEAD/OPTIONS only read.
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: ``Sec-Fetch-Site`` values a browser sends for the server's own pages or a typed-in URL.
TRUSTED_FETCH_SITES = frozenset({"same-origin", "none"})


def host_name(value: str) -> str:
    """``host[:port]`` (``[v6]:port`` too) -> the lower-case host name alone."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    return value.rpartition(":")[0] if value.count(":") == 1 else value


class BrowserGuardMiddleware:
    """The two checks of the module docstring, before any route runs."""

    def __init__(self, app: Any, config: ServerConfig) -> None:
        self.app = app
        self.check_host = config.loopback_host_check and config.host in LOOPBACK_BINDS
        self.hosts = set(LOOPBACK_NAMES)
        if config.public_url:
            self.hosts.add((urlsplit(config.public_url).hostname or "").lower())
        self.check_origin = not config.api_key

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            error = self.refusal(scope)
            if error is not None:
                await error.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, scope: dict[str, Any]) -> APIError | None:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        if self.check_host and host_name(host) not in self.hosts:
            return APIError(
                421,
                f"Host {host[:100]!r} is not this server's: a server bound to loopback answers "
                "only localhost, 127.0.0.1 or [::1] (or the host of --public-url)",
                param="Host",
                code="invalid_host",
            )
        if not self.check_origin or scope["method"] not in UNSAFE_METHODS:
            return None
        site = headers.get("sec-fetch-site")
        origin = headers.get("origin")
        if site is not None and site.lower() not in TRUSTED_FETCH_SITES:
            return self._cross_origin(f"Sec-Fetch-Site: {site[:40]}")
        if origin is not None and origin != "null":
            parts = urlsplit(origin)
            if (parts.netloc or "").lower() != host.lower():
                return self._cross_origin(f"Origin: {origin[:100]}")
        elif origin == "null":
            return self._cross_origin("Origin: null")
        return None

    @staticmethod
    def _cross_origin(what: str) -> APIError:
        return APIError(
            403,
            f"cross-origin request refused ({what}): this server has no API key, so only "
            "same-origin pages and non-browser clients may use it (set --api-key to allow "
            "clients that send the key)",
            type="permission_error",
            code="cross_origin_request",
        )


def websocket_refusal(scope: dict[str, Any], config: ServerConfig) -> APIError | None:
    """The same two checks for a WebSocket handshake (browsers open WebSockets cross-origin
    without a preflight, and cannot send an API key: so a foreign Origin is refused always)."""
    guard = BrowserGuardMiddleware(None, config)
    guard.check_origin = True
    return guard.refusal({**scope, "method": "POST"})


def bearer_ok(headers: Any, config: ServerConfig) -> bool:
    """A WebSocket handshake's ``Authorization: Bearer KEY`` (the ``/v1`` router's key check
    reads HTTP requests only): true on a server without a key."""
    key = config.api_key
    if not key:
        return True
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode())
