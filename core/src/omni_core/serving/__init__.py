"""The OpenAI-compatible server behind ``omni serve`` (FastAPI on uvicorn)."""

from omni_core.serving.app import ModelSource, ServerConfig, create_app

__all__ = ["ModelSource", "ServerConfig", "create_app"]
