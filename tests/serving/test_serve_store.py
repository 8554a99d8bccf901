"""The job store on its own: recovery after a crash (re-queued up to a limit), late updates,
listing order and paging."""

from __future__ import annotations

from pathlib import Path

from omni_core.serving.persistence import MAX_RESTARTS, JobStore


def _job(store: JobStore, job_id: str) -> None:
    store.create(
        job_id=job_id,
        model="m",
        prompt="p",
        size="32x32",
        seconds="1",
        request={"prompt": "p"},
        input_path=None,
    )


def test_serve_store_recovery_late_updates_and_paging(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    for i in range(5):
        _job(store, f"video_{i}")
    store.update("video_0", status="completed", progress=100, completed_at=1)
    store.update("video_1", status="in_progress", progress=40)
    # A progress or start update that arrives after the final status changes nothing.
    store.update("video_0", only_active=True, status="in_progress", progress=99)
    assert store.get("video_0").status == "completed" and store.get("video_0").progress == 100
    store.update("video_2", only_active=True, status="in_progress")
    assert store.get("video_2").status == "in_progress"
    store.close()

    store = JobStore(tmp_path)  # "restart"
    requeued, failed = store.recover()
    # Jobs that were running are queued again from the first step, in their original order.
    assert [r.id for r in requeued] == ["video_1", "video_2"] and not failed
    assert all(r.status == "queued" and r.progress == 0 and r.restarts == 1 for r in requeued)
    assert [r.id for r in store.list(status="queued", order="asc")] == [
        f"video_{i}" for i in range(1, 5)
    ]
    # A job that keeps dying with the server fails after MAX_RESTARTS re-runs.
    for attempt in range(MAX_RESTARTS):
        store.update("video_1", status="in_progress")
        requeued, failed = store.recover()
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
    api = store.get("video_0").as_api()
    assert api["object"] == "video" and api["status"] == "completed"
    store.delete("video_0")
    assert store.get("video_0") is None
    store.close()
