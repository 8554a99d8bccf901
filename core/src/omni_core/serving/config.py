"""What ``omni serve`` configures: the served models and the server's limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from omni_core.requests import RequestLimits


class ModelSource(BaseModel):
    """A model to serve: its public id and where it loads from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    path: str = Field(min_length=1)
    pipeline: str | None = None


class ServerConfig(BaseModel):
    """Everything ``omni serve`` configures."""

    model_config = ConfigDict(extra="forbid")

    models: list[ModelSource] = Field(min_length=1)
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    api_key: str | None = None
    state_dir: Path = Field(default_factory=lambda: Path.home() / ".local/state/omni/serve")
    max_batch: int = Field(4, ge=1, le=256)
    max_queue: int = Field(64, ge=1)
    device: str | None = None
    dtype: str | None = None
    attention_backend: str | None = None
    #: Parallel layout of the served models (one worker process per device; see parallelism docs).
    cfg_parallel_size: int = Field(1, ge=1, le=2)
    ulysses_degree: int = Field(1, ge=1)
    max_upload_mb: float = Field(20.0, gt=0)
    max_images: int = Field(8, ge=1, le=64)
    allowed_url_hosts: tuple[str, ...] = ()
    request_timeout_s: float | None = Field(None, gt=0)
    #: Operator limits on what one request may cost (checked after the pipeline's defaults).
    max_steps: int | None = Field(None, ge=1)
    max_pixels: int | None = Field(None, ge=1)
    max_frames: int | None = Field(None, ge=1)
    warmup: bool = True
    #: Shared request fields of the warm-up of image and video models (e.g. a small size).
    warmup_request: dict[str, Any] = Field(default_factory=dict)
    shutdown_grace_s: float = Field(30.0, ge=0)
    #: Extra loading options passed to every pipeline (e.g. ``text_encoder_device``).
    options: dict[str, Any] = Field(default_factory=dict)

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1024 * 1024)

    @property
    def max_body_bytes(self) -> int:
        """Whole request body: room for ``max_images`` uploads (base64 for JSON) plus fields."""
        return int(self.max_upload_bytes * 1.4) * self.max_images + 1024 * 1024

    @property
    def limits(self) -> RequestLimits:
        return RequestLimits(
            max_steps=self.max_steps, max_pixels=self.max_pixels, max_frames=self.max_frames
        )

    def load_options(self) -> dict[str, Any]:
        """The ``Omni(...)`` keywords every served model loads with (``--option`` values win
        over the parallel layout flags, as they always did)."""
        options: dict[str, Any] = dict(self.options)
        if self.attention_backend:
            options["attention"] = self.attention_backend
        if self.cfg_parallel_size * self.ulysses_degree > 1:
            options.setdefault("cfg_parallel_size", self.cfg_parallel_size)
            options.setdefault("ulysses_degree", self.ulysses_degree)
        return {"device": self.device, "dtype": self.dtype, **options}
