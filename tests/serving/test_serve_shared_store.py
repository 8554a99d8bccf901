"""Two real ``omni serve`` processes on one shared job store and output store: a job submitted
to one is answered (status and content) by the other; a job accepted by a server that is then
killed is finished by the other; jobs the first has no room for are taken by the second.

Run twice: a real PostgreSQL server with a real S3-compatible server (moto's, over HTTP), and
one SQLite file with one folder shared by both processes.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from omni_core.testing.services import free_port, omni_command, spawn, wait_until

WARMUP = json.dumps({"width": 32, "height": 32, "num_frames": 5, "num_inference_steps": 1})
JOB = {"model": "wan", "size": "32x32", "num_frames": 5, "seed": 3}


@pytest.fixture(params=["postgresql+s3", "sqlite+folder"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    if request.param == "sqlite+folder":
        return {"jobs": f"sqlite://{tmp_path / 'shared.sqlite3'}", "outputs": f"file://{tmp_path}"}
    from omni_core.testing.services import make_bucket, s3_server

    database = request.getfixturevalue("fresh_database")
    server = s3_server()
    endpoint = server.__enter__()
    request.addfinalizer(lambda: server.__exit__(None, None, None))
    return {"jobs": database, "outputs": make_bucket(endpoint, "omni-shared")}


def _serve(wan: Path, stores: dict[str, str], state: Path, log: Path) -> tuple[Any, str]:
    port = free_port()
    args = ["serve", f"wan={wan}", "--port", str(port), "--state-dir", str(state)]
    args += ["--job-store", stores["jobs"], "--output-store", stores["outputs"]]
    args += ["--job-lease", "6", "--max-batch", "1", "--warmup-request", WARMUP]
    return spawn(omni_command(*args, "--log-level", "warning"), log), f"http://127.0.0.1:{port}"


def _healthy(url: str, log: Path) -> None:
    wait_until(
        f"{url} healthy", lambda: httpx.get(f"{url}/health", timeout=2).status_code == 200, log
    )


def _poll(client: httpx.Client, video_id: str, predicate: Any, timeout: float = 180) -> Any:
    return wait_until(
        f"job {video_id}",
        lambda: predicate(job := client.get(f"/v1/videos/{video_id}").json()) and job,
        timeout=timeout,
    )


def a_is_idle(client: httpx.Client) -> bool:
    """No request running on that server (its engine stopped the cancelled job)."""
    metrics = client.get("/metrics").text
    return 'omni_running_requests{model="wan"} 0.0' in metrics


def test_serve_two_servers_share_jobs_and_outputs(checkpoints, stores, tmp_path: Path) -> None:
    if "wan" not in checkpoints.paths:
        pytest.skip(f"wan: {checkpoints.missing.get('wan')}")
    wan = checkpoints.paths["wan"]
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    a, url_a = _serve(wan, stores, tmp_path / "state-a", log_a)
    b, url_b = _serve(wan, stores, tmp_path / "state-b", log_b)
    try:
        _healthy(url_a, log_a)
        _healthy(url_b, log_b)
        with (
            httpx.Client(base_url=url_a, timeout=60) as ca,
            httpx.Client(base_url=url_b, timeout=60) as cb,
        ):
            # Submitted to A, answered by B: status and the very same bytes.
            done = ca.post("/v1/videos", json={**JOB, "prompt": "shared", "num_inference_steps": 2})
            assert done.status_code == 200, done.text
            job = _poll(cb, done.json()["id"], lambda j: j["status"] == "completed")
            assert job["expires_at"] == job["completed_at"] + 7 * 86400  # the default retention
            from_b = cb.get(f"/v1/videos/{job['id']}/content")
            assert from_b.status_code == 200 and from_b.content[4:8] == b"ftyp"
            assert ca.get(f"/v1/videos/{job['id']}/content").content == from_b.content

            # Cancelled through B while it runs on A: A stops it at its next lease renewal.
            doomed = ca.post(
                "/v1/videos", json={**JOB, "prompt": "doomed", "num_inference_steps": 200}
            ).json()["id"]
            _poll(ca, doomed, lambda j: j["status"] == "in_progress")
            assert cb.delete(f"/v1/videos/{doomed}").json()["status"] == "cancelled"
            assert (
                _poll(ca, doomed, lambda j: j["status"] != "in_progress")["status"] == "cancelled"
            )
            wait_until("A's slot free again", lambda: a_is_idle(ca), timeout=30)

            # A long job on A (its only slot), then two more: A has no room, so they wait in
            # the store and B, which has, takes them. A is killed mid-job.
            long = ca.post("/v1/videos", json={**JOB, "prompt": "long", "num_inference_steps": 200})
            long_id = long.json()["id"]
            _poll(ca, long_id, lambda j: j["status"] == "in_progress" and j["progress"] > 0)
            spill = [
                ca.post(
                    "/v1/videos", json={**JOB, "prompt": f"spill {i}", "num_inference_steps": 1}
                ).json()["id"]
                for i in range(2)
            ]
            a.send_signal(signal.SIGKILL)
            a.wait(30)
            for video_id in spill:
                _poll(cb, video_id, lambda j: j["status"] == "completed", timeout=120)
            # B re-runs the killed job from its first step and serves the result.
            rerun = _poll(cb, long_id, lambda j: j["status"] in ("completed", "failed"), 240)
            assert rerun["status"] == "completed", rerun
            assert cb.get(f"/v1/videos/{long_id}/content").content[4:8] == b"ftyp"
            listed = {j["id"] for j in cb.get("/v1/videos", params={"limit": 100}).json()["data"]}
            assert {job["id"], long_id, *spill} <= listed  # nothing accepted was lost

            # Deleting through B removes the job and its content for everyone.
            assert cb.delete(f"/v1/videos/{job['id']}").json()["deleted"] is True
            assert cb.get(f"/v1/videos/{job['id']}").status_code == 404
    finally:
        for proc in (a, b):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
