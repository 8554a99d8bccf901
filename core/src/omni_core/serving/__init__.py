"""The OpenAI-compatible server behind ``omni serve`` (FastAPI on uvicorn).

Names are resolved lazily so that ``omni bench serve`` (a client) does not import the server.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.serving.app import ModelSource, ServerConfig, create_app

__all__ = ["ModelSource", "ServerConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(import_module("omni_core.serving.app"), name)
    raise AttributeError(f"module 'omni_core.serving' has no attribute {name!r}")
