"""Video jobs on disk: SQLite for the job records, plain files for inputs and outputs.

Why: a video takes minutes; a restart must not lose what finished or what was asked for. Queued
jobs that never started are kept and run again after a restart (their request and input image are
stored); a job that was running when the process died is queued again from its first step, up to
:data:`MAX_RESTARTS` times (a job that keeps killing the server then fails with the reason).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    progress INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    completed_at INTEGER,
    error TEXT,
    prompt TEXT,
    size TEXT,
    seconds TEXT,
    request TEXT NOT NULL,
    input_path TEXT,
    output_path TEXT,
    restarts INTEGER NOT NULL DEFAULT 0
)
"""

#: Times a job that was running when the server died is queued again before it is failed.
MAX_RESTARTS = 3

TERMINAL = ("completed", "failed", "cancelled")


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
    input_path: str | None
    output_path: str | None
    #: Times this job was re-queued because the server died while it ran.
    restarts: int = 0

    def as_api(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "video",
            "model": self.model,
            "status": self.status,
            "progress": self.progress,
            "created_at": self.created_at,
            "completed_at": self.completed_at,
            "expires_at": None,
            "error": self.error,
            "prompt": self.prompt,
            "size": self.size or "",
            "seconds": self.seconds or "",
            "remixed_from_video_id": None,
        }


class JobStore:
    """Thread-safe job table in ``<state_dir>/jobs.sqlite3``; files in ``videos/``, ``inputs/``."""

    def __init__(self, state_dir: Path) -> None:
        self.root = Path(state_dir)
        self.videos = self.root / "videos"
        self.inputs = self.root / "inputs"
        self.images = self.root / "images"
        for folder in (self.root, self.videos, self.inputs, self.images):
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o700)  # prompts and outputs are the clients' business, no one else's
        self._lock = threading.Lock()
        db = self.root / "jobs.sqlite3"
        os.close(os.open(db, os.O_CREAT | os.O_WRONLY, 0o600))
        db.chmod(0o600)  # SQLite gives its -wal and -shm files the same mode
        self._db = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(jobs)")}
        if "restarts" not in columns:  # a state dir from omni-core 0.2.0
            self._db.execute("ALTER TABLE jobs ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def recover(self, max_restarts: int = MAX_RESTARTS) -> tuple[list[JobRecord], list[JobRecord]]:
        """After a restart: re-queue the jobs that were running (from their first step), or fail
        those re-queued ``max_restarts`` times already; returns (re-queued, failed)."""
        now = int(time.time())
        error = json.dumps(
            {
                "code": "server_restarted",
                "message": f"the server stopped while this job was running, {max_restarts + 1} "
                "times (process exited or was killed); it was not run again: submit it again",
            }
        )
        with self._lock:
            rows = self._db.execute(
                "SELECT id, restarts FROM jobs WHERE status = 'in_progress'"
            ).fetchall()
            again = [i for i, n in rows if n < max_restarts]
            gone = [i for i, n in rows if n >= max_restarts]
            self._db.executemany(
                "UPDATE jobs SET status = 'queued', progress = 0, restarts = restarts + 1 "
                "WHERE id = ?",
                [(i,) for i in again],
            )
            self._db.executemany(
                "UPDATE jobs SET status = 'failed', error = ?, completed_at = ? WHERE id = ?",
                [(error, now, i) for i in gone],
            )
        requeued = [r for r in (self.get(i) for i in again) if r is not None]
        failed = [r for r in (self.get(i) for i in gone) if r is not None]
        return requeued, failed

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
    ) -> JobRecord:
        now = int(time.time())
        with self._lock:
            self._db.execute(
                "INSERT INTO jobs (id, model, status, progress, created_at, prompt, size, seconds,"
                " request, input_path) VALUES (?, ?, 'queued', 0, ?, ?, ?, ?, ?, ?)",
                (job_id, model, now, prompt, size, seconds, json.dumps(request), input_path),
            )
        record = self.get(job_id)
        assert record is not None
        return record

    def update(self, job_id: str, *, only_active: bool = False, **fields: Any) -> None:
        """Set columns of a job. ``only_active`` updates (start, progress) never touch a job
        that already reached a final status: they may arrive late from another thread."""
        if not fields:
            return
        if "error" in fields and fields["error"] is not None:
            fields["error"] = json.dumps(fields["error"])
        columns = ", ".join(f"{k} = ?" for k in fields)
        where = "id = ?"
        if only_active:
            where += " AND status IN ('queued', 'in_progress')"
        with self._lock:
            self._db.execute(f"UPDATE jobs SET {columns} WHERE {where}", (*fields.values(), job_id))

    def get(self, job_id: str) -> JobRecord | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _record(row) if row else None

    def list(
        self,
        *,
        status: str | None = None,
        order: str = "desc",
        limit: int = 100,
        after: str | None = None,
    ) -> list[JobRecord]:
        direction = "ASC" if order == "asc" else "DESC"
        query = "SELECT * FROM jobs"
        args: list[Any] = []
        clauses = []
        if status is not None:
            clauses.append("status = ?")
            args.append(status)
        if after is not None:
            anchor = self.get(after)
            if anchor is not None:
                op = ">" if direction == "ASC" else "<"
                clauses.append(f"(created_at, id) {op} (?, ?)")
                args.extend([anchor.created_at, anchor.id])
        if clauses:
            query += " WHERE " + " AND ".join(clauses)
        query += f" ORDER BY created_at {direction}, id {direction} LIMIT ?"
        args.append(limit)
        with self._lock:
            rows = self._db.execute(query, args).fetchall()
        return [_record(r) for r in rows]

    def delete(self, job_id: str) -> None:
        record = self.get(job_id)
        with self._lock:
            self._db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
        if record is not None:
            for path in (record.output_path, record.input_path):
                if path:
                    Path(path).unlink(missing_ok=True)


def _record(row: tuple[Any, ...]) -> JobRecord:
    (
        job_id,
        model,
        status,
        progress,
        created_at,
        completed_at,
        error,
        prompt,
        size,
        seconds,
        request,
        input_path,
        output_path,
        restarts,
    ) = row
    return JobRecord(
        id=job_id,
        model=model,
        status=status,
        progress=int(progress),
        created_at=int(created_at),
        completed_at=completed_at,
        error=json.loads(error) if error else None,
        prompt=prompt,
        size=size,
        seconds=seconds,
        request=json.loads(request),
        input_path=input_path,
        output_path=output_path,
        restarts=int(restarts),
    )
