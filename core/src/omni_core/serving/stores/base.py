"""The two storage interfaces of ``omni serve``: :class:`JobStore` (video-job records) and
:class:`OutputStore` (the bytes: outputs, uploaded inputs, images returned by URL).

Why interfaces: one server keeps both on its own disk (SQLite + a folder, the default); several
servers (replicas behind a load balancer, a Ray Serve deployment) share one PostgreSQL job store
and one S3-compatible bucket, so any of them answers for any job.

The job state machine is the same for every store: ``queued -> in_progress -> completed |
failed | cancelled``. A job is *owned* by the server whose engine holds it (``owner``, with a
lease the owner renews); a job whose owner died (lease expired, or a process of this host that
is gone) is queued again from its first step, up to a retry limit, and any server with room
claims it (:meth:`JobStore.claim`: distinct jobs for distinct servers).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

#: Times a job that was running when its server died is queued again before it is failed.
MAX_RESTARTS = 3

TERMINAL = ("completed", "failed", "cancelled")
ACTIVE = ("queued", "in_progress")


@dataclass
class JobRecord:
    """One video job as stored; :meth:`as_api` is the OpenAI ``video`` object."""

    id: str
    model: str
    status: str
    progress: int
    created_at: int
    completed_at: int | None
    error: dict[str, Any] | None
    prompt: str | None
    size: str | None
    seconds: str | None
    request: dict[str, Any]
    #: Keys in the output store (older SQLite rows hold absolute paths: still readable).
    input_path: str | None
    output_path: str | None
    #: Times this job was re-queued because the server running it died.
    restarts: int = 0
    #: The server whose engine holds the job (None: waiting in the store for any server).
    owner: str | None = None
    lease_until: int | None = None
    #: How the job ran, once it completed: ``stage_durations`` (seconds by stage),
    #: ``peak_memory_mb`` (where the device reports it) and ``inference_time_s``.
    metrics: dict[str, Any] | None = None

    def as_api(self, keep_s: float | None = None, *, timings: bool = False) -> dict[str, Any]:
        """The OpenAI ``video`` object; ``keep_s`` (the retention age) sets ``expires_at``;
        ``timings`` adds :attr:`metrics` in vLLM-Omni's fields (its benchmark reads them)."""
        expires = None
        if keep_s and self.completed_at is not None:
            expires = int(self.completed_at + keep_s)
        extra = dict(self.metrics or {}) if timings else {}
        return {
            **extra,
            "id": self.id,
            "object": "video",
            "model": self.model,
            "status": self.status,
            "progress": self.progress,
            "created_at": self.created_at,
            "completed_at": self.completed_at,
            "expires_at": expires,
            "error": self.error,
            "prompt": self.prompt,
            "size": self.size or "",
            "seconds": self.seconds or "",
            "remixed_from_video_id": None,
        }


class JobStore(abc.ABC):
    """Where video-job records live. Thread-safe; every method is one transaction."""

    #: Scheme of the ``--job-store`` URL (``sqlite``, ``postgresql``).
    scheme: ClassVar[str]

    @abc.abstractmethod
    def create(
        self,
        *,
        job_id: str,
        model: str,
        prompt: str,
        size: str | None,
        seconds: str | None,
        request: dict[str, Any],
        input_path: str | None,
        owner: str | None = None,
        lease_s: float = 0,
    ) -> JobRecord:
        """A new ``queued`` job, owned by ``owner`` (its engine has it) or by no one."""

    @abc.abstractmethod
    def update(
        self, job_id: str, *, only_active: bool = False, if_owner: str | None = None, **fields: Any
    ) -> bool:
        """Set fields of a job; False when nothing matched. ``only_active``: never touch a job
        that already reached a final status (late progress from another thread); ``if_owner``:
        only while that server still owns it (a server that lost its lease writes nothing)."""

    @abc.abstractmethod
    def get(self, job_id: str) -> JobRecord | None: ...

    @abc.abstractmethod
    def list(
        self,
        *,
        status: str | None = None,
        order: str = "desc",
        limit: int = 100,
        after: str | None = None,
    ) -> list[JobRecord]:
        """Jobs by ``(created_at, id)``; ``after``: the page after that job."""

    @abc.abstractmethod
    def count(self, *, status: str, model: str | None = None) -> int: ...

    @abc.abstractmethod
    def delete(self, job_id: str) -> JobRecord | None:
        """Remove the record; returns it (the caller removes its files), None if absent."""

    @abc.abstractmethod
    def claim(
        self, owner: str, models: Iterable[str], limit: int, lease_s: float
    ) -> list[JobRecord]:
        """Take up to ``limit`` unowned queued jobs of ``models``, oldest first. Servers claiming
        at once get distinct jobs (row locks / one writer)."""

    @abc.abstractmethod
    def renew(self, owner: str, lease_s: float) -> dict[str, str]:
        """Extend the leases of ``owner``'s active jobs; returns the jobs ``owner`` still holds
        with their status, and those of its jobs cancelled lately by another server (a running
        job missing from it was taken away: re-queued after a lost lease)."""

    @abc.abstractmethod
    def owners(self) -> set[str]:
        """The owners of active jobs (to find the dead ones of this host)."""

    @abc.abstractmethod
    def recover(
        self, *, dead: Iterable[str] = (), max_restarts: int = MAX_RESTARTS
    ) -> tuple[list[JobRecord], list[JobRecord]]:
        """Jobs of dead owners (``dead``, or lease expired) go back to the store: running ones
        are queued again from their first step (``restarts`` + 1), or failed with
        ``server_restarted`` after ``max_restarts``; queued ones just lose their owner.
        Returns (re-queued, failed)."""

    @abc.abstractmethod
    def finished_before(self, when: int, limit: int = 500) -> list[JobRecord]:
        """Terminal jobs completed before ``when`` (epoch seconds), oldest first."""

    @abc.abstractmethod
    def close(self) -> None: ...


@dataclass(frozen=True)
class StoredObject:
    """One object of an :class:`OutputStore`."""

    key: str
    size: int
    #: Last modification, epoch seconds.
    mtime: float


class OutputStore(abc.ABC):
    """Where the bytes live, by key (``videos/ID.mp4``, ``inputs/ID.png``, ``images/NAME``)."""

    #: Scheme of the ``--output-store`` URL (``file``, ``s3``).
    scheme: ClassVar[str]

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> str:
        """Store ``data`` under ``key``; returns the key."""

    def put_file(self, key: str, path: Path) -> str:
        """Store the file at ``path`` (stores that can, move or stream it)."""
        return self.put(key, Path(path).read_bytes())

    @abc.abstractmethod
    def get(self, key: str) -> bytes | None:
        """The bytes, or None when there is no such object."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool: ...

    def local_path(self, key: str) -> Path | None:
        """A file on this machine holding the object, for stores that have one (served with
        ``sendfile``); None otherwise."""
        return None

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object (no error when it is absent)."""

    @abc.abstractmethod
    def scan(self, prefix: str = "") -> Iterator[StoredObject]:
        """Every object under ``prefix`` (for the retention sweeper)."""

    def check(self) -> None:
        """Raise OSError when the store cannot be written (called at start)."""
        return None

    def close(self) -> None:
        """Release connections."""
        return None
