"""Kept for imports written before the job stores: the job records and the job stores now live
in :mod:`omni_core.serving.stores` (the interface, SQLite, PostgreSQL, output stores)."""

from __future__ import annotations

from omni_core.serving.stores.base import MAX_RESTARTS, TERMINAL, JobRecord, JobStore
from omni_core.serving.stores.sqlite import SQLiteJobStore

__all__ = ["MAX_RESTARTS", "TERMINAL", "JobRecord", "JobStore", "SQLiteJobStore"]
