"""Persistence across a crash: `omni serve` killed with SIGKILL mid-job, restarted on the same
state dir. Finished jobs are listed and served, the running one is failed with the reason, the
queued one runs after the restart; SIGTERM finishes in-flight work before exiting.

This is the only test that starts server processes (two `omni serve`, imports paid twice).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

WARMUP = json.dumps({"width": 32, "height": 32, "num_frames": 5, "num_inference_steps": 2})
JOB = {"model": "wan", "size": "32x32", "num_frames": 5, "seed": 1}


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(wan: Path, state: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-c",
        "from omni_core.cli import main; main()",
        "serve",
        f"wan={wan}",
        "--port",
        str(port),
        "--state-dir",
        str(state),
        "--max-batch",
        "1",
        "--max-steps",  # the default limit (200) would refuse the long-running job
        "1000",
        "--warmup-request",
        WARMUP,
        "--log-level",
        "warning",
    ]
    return subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def _wait_healthy(
    proc: subprocess.Popen[bytes], url: str, log: Path, timeout: float = 240
) -> list[dict[str, Any]]:
    """Wait for 200; returns the 503 bodies seen while the model was loading."""
    deadline = time.monotonic() + timeout
    loading: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            response = httpx.get(f"{url}/health", timeout=2)
            if response.status_code == 200:
                return loading
            assert response.status_code == 503, response.text
            loading.append(response.json())
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"server not healthy in time:\n{log.read_text()[-3000:]}")


def _poll(client: httpx.Client, video_id: str, predicate: Any, timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/videos/{video_id}").json()
        if predicate(job):
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {video_id} never reached the state: {job}")


def test_serve_kill_restart_and_graceful_shutdown(checkpoints, tmp_path: Path) -> None:
    if "wan" not in checkpoints.paths:
        pytest.skip(f"wan: {checkpoints.missing.get('wan')}")
    wan, state, log = checkpoints.paths["wan"], tmp_path / "state", tmp_path / "server.log"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start(wan, state, port, log)
    try:
        loading = _wait_healthy(proc, url, log)
        # The port opens before the model is loaded and warmed: /health says so with a 503.
        assert loading and loading[0]["models"] == {"wan": "loading"}, loading
        with httpx.Client(base_url=url, timeout=60) as client:  # no API key configured: open
            done = client.post(
                "/v1/videos", json={**JOB, "prompt": "done", "num_inference_steps": 2}
            ).json()
            _poll(client, done["id"], lambda j: j["status"] == "completed")
            mp4 = client.get(f"/v1/videos/{done['id']}/content").content
            assert mp4[4:8] == b"ftyp"
            running = client.post(
                "/v1/videos", json={**JOB, "prompt": "running", "num_inference_steps": 1000}
            ).json()
            queued = client.post(
                "/v1/videos", json={**JOB, "prompt": "queued", "num_inference_steps": 2}
            ).json()
            _poll(
                client, running["id"], lambda j: j["status"] == "in_progress" and j["progress"] > 0
            )
            assert client.get(f"/v1/videos/{queued['id']}").json()["status"] == "queued"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

        proc = _start(wan, state, port, log)
        _wait_healthy(proc, url, log)
        with httpx.Client(base_url=url, timeout=60) as client:
            listed = {j["id"]: j for j in client.get("/v1/videos").json()["data"]}
            assert {done["id"], running["id"], queued["id"]} <= set(listed)
            assert listed[done["id"]]["status"] == "completed"
            assert client.get(f"/v1/videos/{done['id']}/content").content == mp4
            failed = listed[running["id"]]
            assert failed["status"] == "failed"
            assert failed["error"]["code"] == "server_restarted"
            assert "stopped while this job was running" in failed["error"]["message"]
            _poll(client, queued["id"], lambda j: j["status"] == "completed")

            # SIGTERM: the running job is finished (grace period) before the process exits.
            last = client.post(
                "/v1/videos", json={**JOB, "prompt": "graceful", "num_inference_steps": 20}
            ).json()
            _poll(client, last["id"], lambda j: j["status"] == "in_progress")
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught (exit -15).
        assert proc.wait(120) in (0, -signal.SIGTERM), log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)

    from omni_core.serving.persistence import JobStore

    store = JobStore(state)
    try:
        record = store.get(last["id"])
        assert record is not None and record.status == "completed", record
        assert record.output_path and Path(record.output_path).is_file()
    finally:
        store.close()
