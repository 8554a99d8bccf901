"""The browser playground of ``omni serve``: one page at ``/`` and ``/playground`` (its files
under ``/playground/static/``) that tries every served model through the public API.

The files are plain HTML, CSS and JavaScript packaged in omni-core
(``omni_core/serving/static/playground``): no CDN, nothing fetched at run time, no build step.
The page is open (it asks for the API key itself and keeps it in memory unless the user ticks
"remember"); what it calls is the ``/v1`` API, behind the key as for any client. Every answer
of these routes carries a strict Content-Security-Policy: scripts and styles only from this
server, requests only to this origin, no framing, and Trusted Types on, so a string can never
become HTML in the page (the scripts write text with ``textContent`` only).
``omni serve --no-playground`` (``ServerConfig.playground=False``) leaves it out.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import Response

from omni_core.serving.errors import APIError

#: Sent with the page and its files. ``blob:``/``data:`` are the results the page makes itself
#: (images, the video it downloaded with the key, the audio it assembles).
CSP = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' blob: data:",
        "media-src 'self' blob: data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
        "require-trusted-types-for 'script'",
        "trusted-types 'none'",
    )
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-cache",
}
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


def read_files() -> dict[str, bytes]:
    """The packaged files by name (read once, when the app is built)."""
    folder = resources.files("omni_core.serving") / "static" / "playground"
    return {
        entry.name: entry.read_bytes()
        for entry in folder.iterdir()
        if entry.is_file() and any(entry.name.endswith(ext) for ext in MEDIA_TYPES)
    }


def _response(name: str, body: bytes) -> Response:
    media_type = next(t for ext, t in MEDIA_TYPES.items() if name.endswith(ext))
    return Response(body, media_type=media_type, headers=HEADERS)


def add_playground(app: FastAPI) -> None:
    """Serve the page at ``/`` and ``/playground`` and its files at ``/playground/static/``."""
    files = read_files()
    page = files["index.html"]

    @app.get("/", include_in_schema=False)
    async def root() -> Response:
        return _response("index.html", page)

    @app.get("/playground", include_in_schema=False)
    async def playground() -> Response:
        return _response("index.html", page)

    @app.get("/playground/static/{name}", include_in_schema=False)
    async def static(name: str) -> Response:
        body = files.get(name)
        if body is None:
            raise APIError(404, f"no playground file {name!r}", param="name", code="not_found")
        return _response(name, body)
