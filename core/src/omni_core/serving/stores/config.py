"""What ``omni serve --job-store/--output-store/--retention-*`` configures (``ServerConfig.
storage``); plain pydantic, no driver imported."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: Finished jobs, their outputs and inputs, and images returned by URL are kept this long.
DEFAULT_RETENTION_AGE_S = 7 * 24 * 3600.0
#: Total bytes of the output store above which the oldest objects are removed first.
DEFAULT_RETENTION_BYTES = 20 * 1024**3
#: Seconds between two sweeps.
DEFAULT_SWEEP_INTERVAL_S = 300.0
#: Seconds a server's claim on a job lasts without renewal (renewed every third of it).
DEFAULT_LEASE_S = 30.0
#: Free space the state folder must keep: below it ``/health`` is 503 (and ``omni serve`` does
#: not start), before writes start failing.
DEFAULT_MIN_FREE_BYTES = 100 * 1024**2


class RetentionPolicy(BaseModel):
    """Outputs and inputs expire by age and by the store's total size (None: never)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_age_s: float | None = Field(DEFAULT_RETENTION_AGE_S, gt=0)
    max_bytes: int | None = Field(DEFAULT_RETENTION_BYTES, gt=0)
    interval_s: float = Field(DEFAULT_SWEEP_INTERVAL_S, gt=0)

    @property
    def enabled(self) -> bool:
        return self.max_age_s is not None or self.max_bytes is not None


class StorageConfig(BaseModel):
    """Where jobs and outputs live (URLs; None: the state dir) and how long they stay."""

    model_config = ConfigDict(extra="forbid")

    #: ``sqlite:///PATH`` or ``postgresql://USER:PASS@HOST:PORT/DB``.
    job_store: str | None = Field(None, max_length=2000)
    #: ``file:///PATH`` or ``s3://BUCKET/PREFIX?endpoint_url=...``.
    output_store: str | None = Field(None, max_length=2000)
    lease_s: float = Field(DEFAULT_LEASE_S, ge=1)
    retention: RetentionPolicy = Field(default_factory=RetentionPolicy)
    #: Free bytes the state folder must keep (``--min-free-space``; 0: any).
    min_free_bytes: int = Field(DEFAULT_MIN_FREE_BYTES, ge=0)
