"""What a deployment plugin's tests read of the omni servers it runs: the job store the replicas
share and the metrics each one exposes.

- :func:`open_job_store` (``url, state_dir``): the store ``omni serve --job-store URL
  --state-dir DIR`` uses (``None``: the state dir's SQLite file), to see which replica owns a
  job (``store.get(job_id).owner``); close it after;
- :func:`server_metrics`: a fresh set of the server's Prometheus metrics (its own registry;
  ``.queue``, ``.jobs``, ... and ``render()``, the ``/metrics`` body), to test what merges or
  scrapes them;
- :func:`serve_on_thread` (``models=[...], state_dir=..., **fields``): the app ``omni serve``
  runs, under uvicorn on 127.0.0.1 on a thread of the test process (imports paid once), for a
  plugin's served tests; yields its URL once ``/health`` answers, stops it after.

The servers themselves: :mod:`omni_core.testing.services` (free ports, ``omni serve`` as a
process, PostgreSQL and S3-compatible servers).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.serving.metrics import Metrics
    from omni_core.serving.stores.base import JobStore

__all__ = ["open_job_store", "serve_on_thread", "server_metrics"]


def open_job_store(url: str | None, state_dir: str | Path) -> JobStore:
    """The job store of ``--job-store url`` (default: ``<state_dir>/jobs.sqlite3``)."""
    from omni_core.serving.stores import open_job_store as open_store

    return open_store(url, Path(state_dir))


def server_metrics() -> Metrics:
    """The server's metrics, in a registry of their own."""
    from omni_core.serving.metrics import Metrics

    return Metrics()


@contextlib.contextmanager
def serve_on_thread(
    *,
    models: list[dict[str, Any]],
    state_dir: str | Path,
    timeout: float = 300.0,
    **fields: Any,
) -> Iterator[str]:
    """omni's app under uvicorn on 127.0.0.1 and a free port, on a daemon thread; yields its base
    URL once ``/health`` answers. ``fields`` are further :class:`ServerConfig` fields; the
    defaults are a test's: CPU, float32, no warm-up request."""
    import httpx
    import uvicorn

    from omni_core.serving import ServerConfig, create_app
    from omni_core.testing.services import free_port

    fields = {"device": "cpu", "dtype": "float32", "warmup": False, **fields}
    config = ServerConfig(
        models=models, host="127.0.0.1", port=free_port(), state_dir=Path(state_dir), **fields
    )
    server = uvicorn.Server(
        uvicorn.Config(create_app(config), host=config.host, port=config.port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://{config.host}:{config.port}"
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError(f"omni serve on {url} did not become healthy")
            time.sleep(0.2)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
