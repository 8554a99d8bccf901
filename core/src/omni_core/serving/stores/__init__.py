"""Where ``omni serve`` keeps its video jobs and outputs: the interfaces
(:class:`~omni_core.serving.stores.base.JobStore`,
:class:`~omni_core.serving.stores.base.OutputStore`), their implementations (SQLite and
PostgreSQL; a local folder and an S3-compatible bucket), the retention policy, and
:func:`open_job_store` / :func:`open_output_store`, which pick one from a URL.

Nothing here imports a database driver or boto3 until a store that needs it is opened.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from omni_core.contract.errors import ConfigError
from omni_core.serving.stores.base import (
    ACTIVE,
    MAX_RESTARTS,
    TERMINAL,
    JobRecord,
    JobStore,
    OutputStore,
    StoredObject,
)
from omni_core.serving.stores.config import RetentionPolicy, StorageConfig

JOB_STORE_SCHEMES = ("sqlite", "postgresql", "postgres")
OUTPUT_STORE_SCHEMES = ("file", "s3")


def check_url(url: str, schemes: tuple[str, ...], flag: str) -> str:
    """The scheme of ``url`` if it is one of ``schemes`` (ConfigError naming ``flag``)."""
    scheme = urlsplit(url).scheme
    if scheme not in schemes:
        raise ConfigError(
            f"{flag}: unknown store {url.split('://')[0]!r}; expected "
            + " or ".join(f"{s}://..." for s in schemes)
        )
    return scheme


def _path_of(url: str) -> Path:
    """``sqlite:///abs/path`` / ``file:///abs/path`` -> the path (relative: ``sqlite:///rel``)."""
    path = urlsplit(url).path
    if not path or path == "/":
        raise ConfigError(f"no path in {url!r}")
    return Path(path)


def open_job_store(url: str | None, state_dir: Path) -> JobStore:
    """The job store of ``--job-store`` (default: ``<state_dir>/jobs.sqlite3``)."""
    from omni_core.serving.stores.sqlite import SQLiteJobStore

    if not url:
        return SQLiteJobStore(Path(state_dir) / "jobs.sqlite3")
    scheme = check_url(url, JOB_STORE_SCHEMES, "--job-store")
    if scheme == "sqlite":
        return SQLiteJobStore(_path_of(url))
    from omni_core.serving.stores.postgres import PostgresJobStore

    return PostgresJobStore(url)


def open_output_store(url: str | None, state_dir: Path) -> OutputStore:
    """The output store of ``--output-store`` (default: the state dir itself)."""
    from omni_core.serving.stores.outputs import LocalOutputStore, S3OutputStore

    if not url:
        return LocalOutputStore(Path(state_dir))
    scheme = check_url(url, OUTPUT_STORE_SCHEMES, "--output-store")
    if scheme == "file":
        return LocalOutputStore(_path_of(url))
    return S3OutputStore(url)


__all__ = [
    "ACTIVE",
    "MAX_RESTARTS",
    "TERMINAL",
    "JobRecord",
    "JobStore",
    "OutputStore",
    "RetentionPolicy",
    "StorageConfig",
    "StoredObject",
    "check_url",
    "open_job_store",
    "open_output_store",
]
