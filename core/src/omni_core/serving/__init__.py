"""The OpenAI-compatible server behind ``omni serve`` (FastAPI on uvicorn).

Names are resolved lazily so that ``omni bench serve`` (a client) does not import the server,
and the config models import no FastAPI.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.serving.app import create_app
    from omni_core.serving.config import ModelSource, ServerConfig

__all__ = ["ModelSource", "ServerConfig", "create_app"]

_WHERE = {
    "ModelSource": "omni_core.serving.config",
    "ServerConfig": "omni_core.serving.config",
    "create_app": "omni_core.serving.app",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'omni_core.serving' has no attribute {name!r}")
