"""Configuration models (pydantic): engine, attention, cache, quantization and parallelism.

Every model forbids unknown fields, so a typo is an error that names the field instead of a
silently ignored setting. :func:`load_config` merges a config file, ``OMNI_*`` environment
variables and explicit options (CLI flags), later sources winning.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AttentionConfig(_Section):
    """Which attention backend runs, globally and per role."""

    backend: str = Field("auto", description="Backend for every role unless overridden.")
    self_attention: str | None = Field(None, alias="self", description="Self-attention backend.")
    cross_attention: str | None = Field(None, alias="cross", description="Cross-attention backend.")
    joint_attention: str | None = Field(None, alias="joint", description="Joint-attention backend.")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def for_role(self, role: str) -> str:
        override = {
            "self": self.self_attention,
            "cross": self.cross_attention,
            "joint": self.joint_attention,
        }[role]
        return override or self.backend


class CacheConfig(_Section):
    """Step cache: which backend (None for none) and its options."""

    backend: str | None = None
    options: dict[str, float | int | str | bool] = Field(default_factory=dict)


class QuantizationConfig(_Section):
    """Quantizer applied to the denoiser's linear layers (None for none)."""

    method: str | None = None
    components: tuple[str, ...] = ("transformer",)


class ParallelConfig(_Section):
    """Multi-device layout."""

    cfg_parallel_size: int = Field(1, ge=1, le=2)
    ulysses_degree: int = Field(1, ge=1)


class EngineConfig(_Section):
    """Engine limits: batching and back-pressure."""

    max_batch: int = Field(4, ge=1, description="Most requests stepped together.")
    max_queue: int = Field(64, ge=1, description="Queued requests before new ones get 429.")
    request_timeout_s: float | None = Field(None, gt=0)
