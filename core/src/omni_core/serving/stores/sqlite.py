"""The default job store: one SQLite file (``<state-dir>/jobs.sqlite3``, or ``--job-store
sqlite:///PATH``), WAL mode, created ``0600``.

Several ``omni serve`` processes of one host may share the file (SQLite has one writer at a time,
so claims are distinct); servers on several hosts need :mod:`~omni_core.serving.stores.postgres`.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from omni_core.serving.stores.sql import Execute, SQLJobStore


class SQLiteJobStore(SQLJobStore):
    """A :class:`~omni_core.serving.stores.base.JobStore` in one SQLite file."""

    scheme = "sqlite"

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        self.path.chmod(0o600)  # SQLite gives its -wal and -shm files the same mode
        self._db = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=30
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self.migrate()

    @contextmanager
    def _transaction(self) -> Iterator[Execute]:
        with self._lock:
            # IMMEDIATE: the write lock is taken at BEGIN, so two processes claiming at once
            # queue up instead of both reading the same free job.
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield lambda sql, args: self._db.execute(sql, args).fetchall()
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _legacy_version(self, execute: Execute) -> int:
        columns = {row[1] for row in execute("PRAGMA table_info(jobs)", ())}
        if not columns:
            return 0
        return 2 if "restarts" in columns else 1  # before the schema versions: with restarts or not

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __repr__(self) -> str:
        return f"SQLiteJobStore({str(self.path)!r})"
