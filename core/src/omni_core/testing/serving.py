"""What a deployment plugin's tests read of the omni servers it runs: the job store the replicas
share and the metrics each one exposes.

- :func:`open_job_store` (``url, state_dir``): the store ``omni serve --job-store URL
  --state-dir DIR`` uses (``None``: the state dir's SQLite file), to see which replica owns a
  job (``store.get(job_id).owner``); close it after;
- :func:`server_metrics`: a fresh set of the server's Prometheus metrics (its own registry;
  ``.queue``, ``.jobs``, ... and ``render()``, the ``/metrics`` body), to test what merges or
  scrapes them.

The servers themselves: :mod:`omni_core.testing.services` (free ports, ``omni serve`` as a
process, PostgreSQL and S3-compatible servers).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.serving.metrics import Metrics
    from omni_core.serving.stores.base import JobStore

__all__ = ["open_job_store", "server_metrics"]


def open_job_store(url: str | None, state_dir: str | Path) -> JobStore:
    """The job store of ``--job-store url`` (default: ``<state_dir>/jobs.sqlite3``)."""
    from omni_core.serving.stores import open_job_store as open_store

    return open_store(url, Path(state_dir))


def server_metrics() -> Metrics:
    """The server's metrics, in a registry of their own."""
    from omni_core.serving.metrics import Metrics

    return Metrics()
