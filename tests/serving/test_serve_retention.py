"""Retention: finished jobs, their outputs and inputs, and images by URL expire by age and by
the output store's total size (on by default); inputs of jobs still to run are never touched.
Real files in a real state dir, a real S3-compatible server, and a real server whose sweeper
runs on its own."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from omni_core.serving.stores import JobStore, OutputStore, RetentionPolicy, open_job_store
from omni_core.serving.stores.outputs import LocalOutputStore
from omni_core.serving.stores.retention import Sweeper

from .conftest import make_job

DAY = 86400.0


def _job(store: JobStore, job_id: str, *, input_path: str | None = None) -> None:
    make_job(store, job_id, input_path=input_path, request={})


def _age(outputs: LocalOutputStore, key: str, seconds: float) -> None:
    when = time.time() - seconds
    os.utime(outputs.root / key, (when, when))


def test_serve_retention_by_age_keeps_what_is_still_needed(tmp_path: Path) -> None:
    store = open_job_store(None, tmp_path)
    outputs = LocalOutputStore(tmp_path)
    now = time.time()
    # A job finished 8 days ago (output + input), one finished an hour ago, one still queued
    # whose input image is 9 days old (it must survive: the job needs it to run).
    for job_id, done_ago in (("video_old", 8 * DAY), ("video_new", 3600.0)):
        outputs.put(f"videos/{job_id}.mp4", b"v" * 100)
        outputs.put(f"inputs/{job_id}.png", b"i" * 10)
        _job(store, job_id, input_path=f"inputs/{job_id}.png")
        store.update(
            job_id,
            status="completed",
            output_path=f"videos/{job_id}.mp4",
            completed_at=int(now - done_ago),
        )
        _age(outputs, f"videos/{job_id}.mp4", done_ago)
    outputs.put("inputs/video_wait.png", b"w" * 10)
    _age(outputs, "inputs/video_wait.png", 9 * DAY)
    _job(store, "video_wait", input_path="inputs/video_wait.png")
    # Images answered by URL: one 8 days old, one fresh; a failed job's input 8 days old.
    outputs.put("images/" + "a" * 32 + ".png", b"x" * 50)
    _age(outputs, "images/" + "a" * 32 + ".png", 8 * DAY)
    outputs.put("images/" + "b" * 32 + ".png", b"y" * 50)
    outputs.put("inputs/video_failed.png", b"f" * 10)
    _age(outputs, "inputs/video_failed.png", 8 * DAY)

    report = Sweeper(store, outputs, RetentionPolicy(max_age_s=7 * DAY, max_bytes=None)).sweep()

    assert store.get("video_old") is None and store.get("video_new") is not None
    assert store.get("video_wait").status == "queued"
    left = sorted(o.key for o in outputs.scan())
    assert left == [
        "images/" + "b" * 32 + ".png",
        "inputs/video_new.png",
        "inputs/video_wait.png",
        "videos/video_new.mp4",
    ]
    assert not (tmp_path / "videos" / "video_old.mp4").exists()
    assert report.jobs == 1 and report.kept_bytes == 50 + 10 + 10 + 100
    store.close()


def test_serve_retention_by_size_removes_the_oldest_first(tmp_path: Path) -> None:
    store = open_job_store(None, tmp_path)
    outputs = LocalOutputStore(tmp_path)
    for i in range(5):  # five finished 1 kB videos, the oldest first
        key = f"videos/video_{i}.mp4"
        outputs.put(key, os.urandom(1000))
        _job(store, f"video_{i}")
        store.update(
            f"video_{i}", status="completed", output_path=key, completed_at=int(time.time())
        )
        _age(outputs, key, 100 - i)
    outputs.put("inputs/video_run.png", os.urandom(1000))  # a running job's input: kept
    _job(store, "video_run", input_path="inputs/video_run.png")
    store.update("video_run", status="in_progress")
    _age(outputs, "inputs/video_run.png", 1000)

    report = Sweeper(store, outputs, RetentionPolicy(max_age_s=None, max_bytes=3500)).sweep()

    assert sorted(o.key for o in outputs.scan()) == [
        "inputs/video_run.png",
        "videos/video_3.mp4",
        "videos/video_4.mp4",
    ]
    # An evicted video takes its job along: the job has expired.
    assert [store.get(f"video_{i}") is None for i in range(5)] == [True, True, True, False, False]
    assert report.bytes == 3000 and report.kept_bytes == 3000
    assert Sweeper(store, outputs, RetentionPolicy(max_age_s=None, max_bytes=None)).due(0) is False
    store.close()


def test_serve_retention_in_an_s3_bucket(tmp_path: Path) -> None:
    from omni_core.serving.stores import open_output_store
    from omni_core.testing.services import make_bucket, s3_server

    with s3_server() as endpoint:
        outputs: OutputStore = open_output_store(make_bucket(endpoint, "keep"), tmp_path)
        outputs.check()
        for i in range(4):
            outputs.put(f"images/{i:032x}.png", os.urandom(2000))
            time.sleep(1.1)  # S3 keeps whole seconds
        assert outputs.get(f"images/{0:032x}.png") is not None
        assert outputs.local_path(f"images/{0:032x}.png") is None  # served from the bucket
        store = open_job_store(None, tmp_path)
        Sweeper(store, outputs, RetentionPolicy(max_age_s=None, max_bytes=4500)).sweep()
        left = sorted(o.key for o in outputs.scan())
        assert left == [f"images/{2:032x}.png", f"images/{3:032x}.png"]
        assert outputs.get(f"images/{0:032x}.png") is None and not outputs.exists(left[0][:-4])
        store.close()


def test_serve_sweeper_runs_in_the_server(checkpoints, tmp_path: Path) -> None:
    """A server with a 3 s retention: an image by URL is served, then gone by itself; so is a
    finished video job (record, content and input image)."""
    from omni_core.serving.stores import StorageConfig

    from .conftest import API_KEY, Checkpoints, server_config, start_server

    wanted = {k: v for k, v in checkpoints.paths.items() if k in ("qwen", "wan")}
    if len(wanted) < 2:
        pytest.skip(f"needs qwen and wan: {checkpoints.missing}")
    storage = StorageConfig(retention=RetentionPolicy(max_age_s=3, interval_s=1))
    ckpts = Checkpoints(paths=wanted)
    config = server_config(ckpts, tmp_path, storage=storage)
    live = start_server(config, ckpts, tmp_path)
    try:
        with live.http() as client:
            image = client.post(
                "/v1/images/generations",
                json={
                    "model": "qwen",
                    "prompt": "a fox",
                    "size": "32x32",
                    "response_format": "url",
                    "num_inference_steps": 2,
                },
            )
            assert image.status_code == 200, image.text
            url = image.json()["data"][0]["url"]
            assert client.get(url).status_code == 200
            job = client.post(
                "/v1/videos",
                json={"model": "wan", "prompt": "a fox", "size": "32x32", "num_frames": 5},
            ).json()
            deadline = time.monotonic() + 60
            while client.get(f"/v1/videos/{job['id']}").json()["status"] != "completed":
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert client.get(f"/v1/videos/{job['id']}/content").status_code == 200
            assert list((tmp_path / "videos").iterdir())
            time.sleep(5.5)  # past the age, and a sweep or two
            missing = client.get(url)
            assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
            gone = client.get(f"/v1/videos/{job['id']}")
            assert gone.status_code == 404 and gone.json()["error"]["code"] == "video_not_found"
            assert not list((tmp_path / "videos").iterdir())
            assert not list((tmp_path / "images").iterdir())
            assert client.headers["Authorization"] == f"Bearer {API_KEY}"
    finally:
        live.stop()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--retention-age", "soon"], "expected a duration like 3600, 30m, 12h or 7d"),
        (["--retention-size", "lots"], "expected a size like 500MB"),
        (["--job-store", "mysql://db/omni"], "unknown store 'mysql'"),
        (["--output-store", "gs://bucket"], "unknown store 'gs'"),
        (["--job-store", "postgresql://omni@127.0.0.1:1/omni"], "--job-store: the job database"),
    ],
)
def test_serve_storage_flags_say_no_in_one_line(tmp_path: Path, args: list[str], needle: str):
    from omni_core.cli import cli

    result = CliRunner().invoke(cli, ["serve", str(tmp_path), *args])
    assert result.exit_code == 2, result.output
    assert needle in result.output and "Traceback" not in result.output


def test_serve_storage_flag_values() -> None:
    from omni_core.commands.storage_options import parse_duration, parse_size

    assert parse_duration("7d", "f") == 7 * DAY and parse_duration("90", "f") == 90
    assert parse_duration("30m", "f") == 1800 and parse_duration("0", "f") is None
    assert parse_duration("off", "f") is None and parse_duration("2w", "f") == 14 * DAY
    assert parse_size("20GiB", "f") == 20 * 1024**3 and parse_size("500MB", "f") == 500 * 10**6
    assert parse_size("0", "f") is None and parse_size("1024", "f") == 1024
