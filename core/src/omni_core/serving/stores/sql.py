"""The SQL of the job stores, shared by SQLite and PostgreSQL (they differ in connecting, column
types and row locks only).

Schema versions live in ``omni_schema``; :data:`MIGRATIONS` brings any older table up to date
at start (a state dir of omni-core 0.2 included), inside one transaction.
"""

from __future__ import annotations

import abc
import json
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from omni_core.serving.stores.base import ACTIVE, MAX_RESTARTS, TERMINAL, JobRecord, JobStore

#: Every column, in the order :func:`_record` reads them.
COLUMNS = (
    "id, model, status, progress, created_at, completed_at, error, prompt, size, seconds, "
    "request, input_path, output_path, restarts, owner, lease_until, metrics"
)

#: (version, statements); ``{int}`` is the dialect's 64-bit integer type.
MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (
        1,
        (
            "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, model TEXT NOT NULL, "
            "status TEXT NOT NULL, progress INTEGER NOT NULL DEFAULT 0, "
            "created_at {int} NOT NULL, completed_at {int}, error TEXT, prompt TEXT, size TEXT, "
            "seconds TEXT, request TEXT NOT NULL, input_path TEXT, output_path TEXT)",
        ),
    ),
    (2, ("ALTER TABLE jobs ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0",)),
    (
        3,
        (
            "ALTER TABLE jobs ADD COLUMN owner TEXT",
            "ALTER TABLE jobs ADD COLUMN lease_until {int}",
            "CREATE INDEX IF NOT EXISTS jobs_status_created ON jobs (status, created_at)",
            "CREATE INDEX IF NOT EXISTS jobs_owner ON jobs (owner)",
        ),
    ),
    (4, ("ALTER TABLE jobs ADD COLUMN metrics TEXT",)),  # stage durations, peak memory
)
SCHEMA_VERSION = MIGRATIONS[-1][0]

#: Runs one statement inside the current transaction and returns its rows.
Execute = Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]


def _marks(n: int) -> str:
    return ", ".join("?" * n)


class SQLJobStore(JobStore):
    """A :class:`JobStore` over one DB-API connection (serialised by a lock)."""

    #: The 64-bit integer column type.
    int_type = "INTEGER"
    #: Appended to the SELECTs that pick rows to change (row locks where the database has them).
    lock_rows = ""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    # -- the dialect ------------------------------------------------------------------------------

    @abc.abstractmethod
    def _transaction(self) -> Any:
        """A context manager: one transaction, yielding an :data:`Execute`."""

    def _schema_version(self, execute: Execute) -> int:
        execute("CREATE TABLE IF NOT EXISTS omni_schema (version INTEGER NOT NULL)", ())
        rows = execute("SELECT version FROM omni_schema", ())
        return int(rows[0][0]) if rows else 0

    def migrate(self) -> int:
        """Bring the schema to :data:`SCHEMA_VERSION`; returns the version found."""
        with self._transaction() as execute:
            found = version = self._schema_version(execute)
            if version == 0:
                version = self._legacy_version(execute)
            for number, statements in MIGRATIONS:
                if number > version:
                    for statement in statements:
                        execute(statement.format(int=self.int_type), ())
            execute("DELETE FROM omni_schema", ())
            execute("INSERT INTO omni_schema (version) VALUES (?)", (SCHEMA_VERSION,))
        return found

    def _legacy_version(self, execute: Execute) -> int:
        """The version of a table made before ``omni_schema`` existed (0: no table)."""
        return 0

    # -- the state machine ----------------------------------------------------------------------

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
        now = int(time.time())
        lease = now + math.ceil(lease_s) if owner else None
        with self._transaction() as execute:
            execute(
                "INSERT INTO jobs (id, model, status, progress, created_at, prompt, size, seconds,"
                " request, input_path, restarts, owner, lease_until) "
                f"VALUES ({_marks(13)})",
                (
                    job_id,
                    model,
                    "queued",
                    0,
                    now,
                    prompt,
                    size,
                    seconds,
                    json.dumps(request),
                    input_path,
                    0,
                    owner,
                    lease,
                ),
            )
        record = self.get(job_id)
        assert record is not None
        return record

    def update(
        self, job_id: str, *, only_active: bool = False, if_owner: str | None = None, **fields: Any
    ) -> bool:
        if not fields:
            return False
        for key in ("error", "metrics"):
            if fields.get(key) is not None:
                fields[key] = json.dumps(fields[key])
        columns = ", ".join(f"{k} = ?" for k in fields)
        where, args = "id = ?", [job_id]
        if only_active:
            where += f" AND status IN ({_marks(len(ACTIVE))})"
            args.extend(ACTIVE)
        if if_owner is not None:
            where += " AND owner = ?"
            args.append(if_owner)
        with self._transaction() as execute:
            rows = execute(
                f"UPDATE jobs SET {columns} WHERE {where} RETURNING id", (*fields.values(), *args)
            )
        return bool(rows)

    def get(self, job_id: str) -> JobRecord | None:
        with self._transaction() as execute:
            rows = execute(f"SELECT {COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        return _record(rows[0]) if rows else None

    def list(
        self,
        *,
        status: str | None = None,
        order: str = "desc",
        limit: int = 100,
        after: str | None = None,
    ) -> list[JobRecord]:
        direction = "ASC" if order == "asc" else "DESC"
        query = f"SELECT {COLUMNS} FROM jobs"
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
        with self._transaction() as execute:
            rows = execute(query, tuple(args))
        return [_record(r) for r in rows]

    def count(self, *, status: str, model: str | None = None) -> int:
        query, args = "SELECT COUNT(*) FROM jobs WHERE status = ?", [status]
        if model is not None:
            query += " AND model = ?"
            args.append(model)
        with self._transaction() as execute:
            return int(execute(query, tuple(args))[0][0])

    def delete(self, job_id: str) -> JobRecord | None:
        with self._transaction() as execute:
            rows = execute(f"DELETE FROM jobs WHERE id = ? RETURNING {COLUMNS}", (job_id,))
        return _record(rows[0]) if rows else None

    def claim(
        self, owner: str, models: Iterable[str], limit: int, lease_s: float
    ) -> list[JobRecord]:
        models = list(models)
        if not models or limit <= 0:
            return []
        lease = int(time.time()) + math.ceil(lease_s)
        with self._transaction() as execute:
            ids = [
                row[0]
                for row in execute(
                    "SELECT id FROM jobs WHERE status = 'queued' AND owner IS NULL AND model IN "
                    f"({_marks(len(models))}) ORDER BY created_at, id LIMIT ?{self.lock_rows}",
                    (*models, limit),
                )
            ]
            if not ids:
                return []
            rows = execute(
                f"UPDATE jobs SET owner = ?, lease_until = ? WHERE id IN ({_marks(len(ids))}) "
                f"AND owner IS NULL AND status = 'queued' RETURNING {COLUMNS}",
                (owner, lease, *ids),
            )
        return sorted((_record(r) for r in rows), key=lambda r: (r.created_at, r.id))

    def renew(self, owner: str, lease_s: float) -> dict[str, str]:
        lease = int(time.time()) + math.ceil(lease_s)
        with self._transaction() as execute:
            execute(
                "UPDATE jobs SET lease_until = ? WHERE owner = ? AND status IN (?, ?)",
                (lease, owner, *ACTIVE),
            )
            # what this server may be running: its active jobs, and those cancelled lately
            # (by another server); not its whole history
            rows = execute(
                "SELECT id, status FROM jobs WHERE owner = ? AND (status IN (?, ?) OR "
                "(status = 'cancelled' AND completed_at >= ?))",
                (owner, *ACTIVE, lease - 10 * math.ceil(lease_s)),
            )
        return {job_id: status for job_id, status in rows}

    def owners(self) -> set[str]:
        with self._transaction() as execute:
            rows = execute(
                "SELECT DISTINCT owner FROM jobs WHERE owner IS NOT NULL AND status IN (?, ?)",
                ACTIVE,
            )
        return {row[0] for row in rows}

    def recover(
        self, *, dead: Iterable[str] = (), max_restarts: int = MAX_RESTARTS
    ) -> tuple[list[JobRecord], list[JobRecord]]:
        now = int(time.time())
        dead = list(dead)
        error = json.dumps(
            {
                "code": "server_restarted",
                "message": f"the server stopped while this job was running, {max_restarts + 1} "
                "times (process exited or was killed); it was not run again: submit it again",
            }
        )
        stale = "(owner IS NULL AND status = 'in_progress') OR lease_until < ?"
        if dead:
            stale += f" OR owner IN ({_marks(len(dead))})"
        with self._transaction() as execute:
            rows = execute(
                f"SELECT id, status, restarts FROM jobs WHERE status IN (?, ?) AND ({stale})"
                f"{self.lock_rows}",
                (*ACTIVE, now, *dead),
            )
            waiting = [i for i, status, _ in rows if status == "queued"]
            again = [i for i, status, n in rows if status == "in_progress" and n < max_restarts]
            gone = [i for i, status, n in rows if status == "in_progress" and n >= max_restarts]
            changed = []
            for ids, sql, args in (
                (waiting, "owner = NULL, lease_until = NULL", ()),
                (
                    again,
                    "status = 'queued', progress = 0, restarts = restarts + 1, owner = NULL, "
                    "lease_until = NULL",
                    (),
                ),
                (
                    gone,
                    "status = 'failed', error = ?, completed_at = ?, owner = NULL",
                    (error, now),
                ),
            ):
                if ids:
                    changed.extend(
                        execute(
                            f"UPDATE jobs SET {sql} WHERE id IN ({_marks(len(ids))}) "
                            f"RETURNING {COLUMNS}",
                            (*args, *ids),
                        )
                    )
        records = {r.id: r for r in map(_record, changed)}
        return [records[i] for i in again], [records[i] for i in gone]

    def finished_before(self, when: int, limit: int = 500) -> list[JobRecord]:
        with self._transaction() as execute:
            rows = execute(
                f"SELECT {COLUMNS} FROM jobs WHERE status IN (?, ?, ?) AND completed_at < ? "
                "ORDER BY completed_at, id LIMIT ?",
                (*TERMINAL, when, limit),
            )
        return [_record(r) for r in rows]


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
        owner,
        lease_until,
        metrics,
    ) = row
    return JobRecord(
        id=job_id,
        model=model,
        status=status,
        progress=int(progress),
        created_at=int(created_at),
        completed_at=int(completed_at) if completed_at is not None else None,
        error=json.loads(error) if error else None,
        prompt=prompt,
        size=size,
        seconds=seconds,
        request=json.loads(request),
        input_path=input_path,
        output_path=output_path,
        restarts=int(restarts),
        owner=owner,
        lease_until=int(lease_until) if lease_until is not None else None,
        metrics=json.loads(metrics) if metrics else None,
    )
