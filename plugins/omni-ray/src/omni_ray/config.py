"""What ``omni deploy ray`` deploys (flags or ``--config FILE``): one Ray Serve deployment per
model, their replica counts and resources, and the omni server settings every replica runs with.

A config file (TOML, JSON or YAML) has the same fields, e.g.::

    host = "0.0.0.0"
    port = 8000
    [server]                          # omni serve's settings (ServerConfig fields)
    storage = {job_store = "postgresql://omni@db/omni", output_store = "s3://omni-out/prod"}
    max_batch = 4
    [[models]]
    id = "wan"
    path = "Wan-AI/Wan2.2-TI2V-5B-Diffusers"
    min_replicas = 1
    max_replicas = 4
    gpus_per_replica = 1
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from omni_core import ConfigError


class ModelDeployment(BaseModel):
    """One model: a Ray Serve deployment whose replicas each own one omni engine."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200)
    path: str = Field(min_length=1)
    pipeline: str | None = None
    #: Replicas at start (and always, without autoscaling).
    replicas: int = Field(1, ge=1)
    #: Autoscaling on queue depth when ``max_replicas`` > ``min_replicas``.
    min_replicas: int | None = Field(None, ge=0)
    max_replicas: int | None = Field(None, ge=1)
    #: Queued + running jobs per replica the autoscaler aims at.
    target_queue_per_replica: float = Field(2.0, gt=0)
    #: Devices of one replica (CFG-parallel / Ulysses layouts stay inside it). None: 1 when the
    #: Ray cluster has GPUs, else 0.
    gpus_per_replica: float | None = Field(None, ge=0)
    cpus_per_replica: float = Field(1.0, ge=0)

    @model_validator(mode="after")
    def _bounds(self) -> ModelDeployment:
        low, high = self.min_replicas, self.max_replicas
        if low is not None and high is not None and high < low:
            raise ValueError(f"{self.id}: max_replicas {high} < min_replicas {low}")
        return self

    @property
    def autoscaling(self) -> bool:
        return self.max_replicas is not None and self.max_replicas > (self.min_replicas or 1)

    def source(self) -> dict[str, Any]:
        """The ``ModelSource`` fields of omni-core."""
        return {"id": self.id, "path": self.path, "pipeline": self.pipeline}


class DeployConfig(BaseModel):
    """Everything one ``omni deploy ray`` starts."""

    model_config = ConfigDict(extra="forbid")

    models: list[ModelDeployment] = Field(min_length=1)
    #: omni serve's settings for every replica (``ServerConfig`` fields but models/host/port).
    server: dict[str, Any] = Field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    #: The Ray cluster (``ray://HOST:10001``, ``HOST:6379``, ``auto``); None: a local one.
    address: str | None = None
    #: The Ray Serve application's name.
    name: str = Field("omni", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    #: Seconds a stopping replica gets for its running requests before omni drains its engine.
    graceful_shutdown_s: float = Field(60.0, ge=0)

    @model_validator(mode="after")
    def _unique(self) -> DeployConfig:
        ids = [m.id for m in self.models]
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        if repeated:
            raise ValueError(f"model ids must be unique, repeated: {', '.join(repeated)}")
        for key in ("models", "host", "port"):
            if key in self.server:
                raise ValueError(f"server.{key}: set it at the top level, not under [server]")
        return self

    def server_config(self, model: ModelDeployment) -> Any:
        """The omni ``ServerConfig`` of ``model``'s replicas (validated: ConfigError)."""
        from omni_core.serving import ServerConfig

        try:
            return ServerConfig(models=[model.source()], host=self.host, port=0, **self.server)
        except ValueError as exc:
            raise ConfigError(f"server settings: {exc}") from None


def load_config_file(path: Path) -> dict[str, Any]:
    """A TOML, JSON or YAML file -> its mapping (ConfigError naming the file)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"--config: cannot read {path}: {exc.strerror}") from None
    suffix = Path(path).suffix.lower()
    try:
        if suffix == ".toml":
            data: Any = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        elif suffix in (".yaml", ".yml"):
            import yaml  # ray[serve] depends on PyYAML

            data = yaml.safe_load(text)
        else:
            raise ConfigError(f"--config: {path.name}: expected .toml, .json, .yaml or .yml")
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"--config: {path.name} does not parse: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config: {path.name}: expected a table of settings at the top")
    return data
