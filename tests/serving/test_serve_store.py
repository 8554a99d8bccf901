"""The job stores on their own, SQLite and a real PostgreSQL server alike: the state machine,
recovery of a dead server's jobs (re-queued up to a limit), leases, distinct claims by servers
claiming at once, late updates, paging, schema migrations (a state dir from before them)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from omni_core.serving.stores import MAX_RESTARTS, JobStore, open_job_store
from omni_core.serving.stores.sql import SCHEMA_VERSION

from .conftest import make_job

DEAD = "host-a:1:dead0000"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'jobs.sqlite3'}"
    return request.getfixturevalue("fresh_database")


def _job(store: JobStore, job_id: str, owner: str | None = None, lease_s: float = 60) -> None:
    make_job(store, job_id, owner=owner, lease_s=lease_s)


def test_serve_store_recovery_late_updates_and_paging(store_url: str, tmp_path: Path) -> None:
    store = open_job_store(store_url, tmp_path)
    for i in range(5):
        _job(store, f"video_{i}", owner=DEAD)
    assert store.update("video_0", status="completed", progress=100, completed_at=1)
    store.update("video_1", status="in_progress", progress=40)
    # A progress or start update that arrives after the final status changes nothing.
    assert not store.update("video_0", only_active=True, status="in_progress", progress=99)
    assert store.get("video_0").status == "completed" and store.get("video_0").progress == 100
    store.update("video_2", only_active=True, status="in_progress")
    assert store.get("video_2").status == "in_progress"
    # A server that lost a job writes nothing to it.
    assert not store.update("video_2", if_owner="someone-else", progress=7)
    store.close()

    store = open_job_store(store_url, tmp_path)  # "restart": the owner is dead
    assert store.owners() == {DEAD}
    requeued, failed = store.recover(dead=[DEAD])
    # Jobs that were running are queued again from the first step, in their original order.
    assert [r.id for r in requeued] == ["video_1", "video_2"] and not failed
    assert all(r.status == "queued" and r.progress == 0 and r.restarts == 1 for r in requeued)
    queued = store.list(status="queued", order="asc")
    assert [r.id for r in queued] == [f"video_{i}" for i in range(1, 5)]
    assert all(r.owner is None for r in queued)  # the dead server's queue is anyone's now
    assert store.count(status="queued", model="m") == 4
    # A job that keeps dying with its server fails after MAX_RESTARTS re-runs.
    for attempt in range(MAX_RESTARTS):
        (claimed,) = store.claim("server-b", ["m"], 1, lease_s=60)
        assert claimed.id == "video_1" and claimed.owner == "server-b"
        store.update("video_1", status="in_progress")
        requeued, failed = store.recover(dead=["server-b"])
        if attempt < MAX_RESTARTS - 1:
            assert [r.id for r in requeued] == ["video_1"] and not failed
    assert not requeued and [r.id for r in failed] == ["video_1"]
    (gone,) = failed
    assert gone.status == "failed" and gone.error["code"] == "server_restarted"
    assert gone.restarts == MAX_RESTARTS
    ids = [r.id for r in store.list(order="asc")]
    assert ids == [f"video_{i}" for i in range(5)]
    page = store.list(order="asc", limit=2, after="video_1")
    assert [r.id for r in page] == ["video_2", "video_3"]
    assert [r.id for r in store.list(order="desc", limit=1)] == ["video_4"]
    api = store.get("video_0").as_api(keep_s=3600)
    assert api["object"] == "video" and api["status"] == "completed"
    assert api["expires_at"] == 1 + 3600
    assert [r.id for r in store.finished_before(int(time.time()) + 1)] == ["video_0", "video_1"]
    deleted = store.delete("video_0")
    assert deleted is not None and deleted.id == "video_0"
    assert store.get("video_0") is None and store.delete("video_0") is None
    store.close()


def test_serve_store_leases_expire_and_renewals_keep_them(store_url: str, tmp_path: Path) -> None:
    store = open_job_store(store_url, tmp_path)
    _job(store, "video_kept", owner="server-a", lease_s=1)
    _job(store, "video_lost", owner="server-b", lease_s=1)
    store.update("video_kept", status="in_progress")
    store.update("video_lost", status="in_progress")
    time.sleep(1.2)
    assert store.renew("server-a", lease_s=30) == {"video_kept": "in_progress"}
    time.sleep(1.0)
    requeued, failed = store.recover()  # no dead owner named: only expired leases count
    assert [r.id for r in requeued] == ["video_lost"] and not failed
    assert store.get("video_kept").owner == "server-a"
    assert store.renew("server-b", lease_s=30) == {}  # server-b has lost it
    store.close()


def test_serve_store_concurrent_claims_take_distinct_jobs(store_url: str, tmp_path: Path) -> None:
    """Four servers (one connection each) claiming from one queue at once: every job is taken
    exactly once."""
    setup = open_job_store(store_url, tmp_path)
    for i in range(40):
        _job(setup, f"video_{i:02d}")
    stores = [open_job_store(store_url, tmp_path) for _ in range(4)]
    taken: dict[str, list[str]] = {f"server-{n}": [] for n in range(4)}
    start = threading.Barrier(4)

    def worker(n: int) -> None:
        start.wait()
        while claimed := stores[n].claim(f"server-{n}", ["m", "other"], 3, lease_s=60):
            taken[f"server-{n}"].extend(r.id for r in claimed)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    everything = [i for ids in taken.values() for i in ids]
    assert sorted(everything) == [f"video_{i:02d}" for i in range(40)]  # no job twice
    for owner, ids in taken.items():
        assert all(setup.get(i).owner == owner for i in ids)
    assert setup.claim("late", ["m"], 5, lease_s=60) == []
    for store in (setup, *stores):
        store.close()


def test_serve_store_migrates_a_state_dir_from_before_schema_versions(tmp_path: Path) -> None:
    """The jobs table from before (no owner, no schema version) is migrated in place: its running
    job is re-queued and its finished job keeps its content (an absolute path, still read)."""
    from omni_core.serving.stores import open_output_store

    outputs = open_output_store(None, tmp_path)
    old_mp4 = outputs.root / "videos" / "video_old.mp4"
    old_mp4.write_bytes(b"\0\0\0\x18ftypmp42")
    db = sqlite3.connect(tmp_path / "jobs.sqlite3")
    db.execute(
        "CREATE TABLE jobs (id TEXT PRIMARY KEY, model TEXT NOT NULL, status TEXT NOT NULL, "
        "progress INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL, completed_at INTEGER, "
        "error TEXT, prompt TEXT, size TEXT, seconds TEXT, request TEXT NOT NULL, "
        "input_path TEXT, output_path TEXT, restarts INTEGER NOT NULL DEFAULT 0)"
    )
    db.execute(
        "INSERT INTO jobs (id, model, status, progress, created_at, completed_at, request, "
        "output_path) VALUES ('video_old', 'm', 'completed', 100, 1, 2, '{}', ?)",
        (str(old_mp4),),
    )
    db.execute(
        "INSERT INTO jobs (id, model, status, progress, created_at, request) "
        "VALUES ('video_run', 'm', 'in_progress', 50, 3, '{}')"
    )
    db.commit()
    db.close()
    store = open_job_store(None, tmp_path)
    assert store.migrate() == SCHEMA_VERSION  # already migrated by the open
    requeued, _ = store.recover()
    assert [r.id for r in requeued] == ["video_run"] and requeued[0].restarts == 1
    old = store.get("video_old")
    assert outputs.get(old.output_path) == old_mp4.read_bytes()
    store.close()


def test_serve_store_postgres_servers_starting_together_migrate_once(fresh_database: str) -> None:
    stores: list[JobStore] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            stores.append(open_job_store(fresh_database, Path("/nonexistent")))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors and len(stores) == 4
    assert all(s.migrate() == SCHEMA_VERSION for s in stores)
    for store in stores:
        store.close()


def test_serve_store_urls_say_what_is_wrong(tmp_path: Path) -> None:
    from omni_core.contract.errors import ConfigError
    from omni_core.serving.stores.postgres import StoreUnavailableError

    with pytest.raises(ConfigError, match="--job-store: unknown store 'mysql'"):
        open_job_store("mysql://x/y", tmp_path)
    with pytest.raises(ConfigError, match="--output-store"):
        from omni_core.serving.stores import open_output_store

        open_output_store("ftp://x/y", tmp_path)
    from omni_core.testing.services import free_port

    with pytest.raises(StoreUnavailableError, match="cannot be reached"):
        open_job_store(f"postgresql://postgres@127.0.0.1:{free_port()}/x", tmp_path)
