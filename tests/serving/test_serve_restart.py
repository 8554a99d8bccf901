"""Persistence across a crash and a shutdown: `omni serve` killed with SIGKILL mid-job, restarted
on the same state dir: finished jobs are listed and served, the running one runs again from its
first step, the queued one runs. SIGTERM: new requests get 503 at once while the running job
finishes; the queued one stays queued and runs after the next start.

This is the only test that starts server processes (three `omni serve`, imports paid each time).
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
    # A fresh port for each start: another process may take the last one while this is down.
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
                "/v1/videos", json={**JOB, "prompt": "running", "num_inference_steps": 40}
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

        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        proc = _start(wan, state, port, log)
        _wait_healthy(proc, url, log)
        with httpx.Client(base_url=url, timeout=60) as client:
            listed = {j["id"]: j for j in client.get("/v1/videos").json()["data"]}
            assert {done["id"], running["id"], queued["id"]} <= set(listed)
            assert listed[done["id"]]["status"] == "completed"
            assert client.get(f"/v1/videos/{done['id']}/content").content == mp4
            # The job killed mid-run is queued again (from its first step) and completes.
            rerun = _poll(client, running["id"], lambda j: j["status"] in TERMINAL)
            assert rerun["status"] == "completed", rerun
            assert client.get(f"/v1/videos/{running['id']}/content").content[4:8] == b"ftyp"
            _poll(client, queued["id"], lambda j: j["status"] == "completed")

            # SIGTERM with one running and one queued job (--max-batch 1).
            last = client.post(
                "/v1/videos", json={**JOB, "prompt": "graceful", "num_inference_steps": 60}
            ).json()
            waiting = client.post(
                "/v1/videos", json={**JOB, "prompt": "waiting", "num_inference_steps": 2}
            ).json()
            _poll(client, last["id"], lambda j: j["status"] == "in_progress")
        proc.send_signal(signal.SIGTERM)
        refused = _after_sigterm(url)
        assert refused.status_code == 503, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        error = refused.json()["error"]
        assert error["type"] == "server_error" and "shutting down" in error["message"], error
        # uvicorn shuts down gracefully, then re-raises the signal it caught (exit -15).
        assert proc.wait(120) in (0, -signal.SIGTERM), log.read_text()[-3000:]

        from omni_core.serving.stores import open_job_store

        store = open_job_store(None, state)
        try:
            record = store.get(last["id"])  # finished within the grace period
            assert record is not None and record.status == "completed", record
            assert record.output_path and (state / record.output_path).is_file()
            record = store.get(waiting["id"])  # never started: left queued, not failed
            assert record is not None and record.status == "queued", record
        finally:
            store.close()

        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        proc = _start(wan, state, port, log)
        _wait_healthy(proc, url, log)
        with httpx.Client(base_url=url, timeout=60) as client:
            _poll(client, waiting["id"], lambda j: j["status"] == "completed")
            assert client.get(f"/v1/videos/{last['id']}").json()["status"] == "completed"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


TERMINAL = ("completed", "failed", "cancelled")


def _after_sigterm(url: str, timeout: float = 10) -> httpx.Response:
    """The first answer to a new request after SIGTERM that is not a 2xx: while the running job
    finishes, the socket stays open (a refused connection fails the test)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with httpx.Client(base_url=url, timeout=10) as fresh:  # a new connection each time
            response = fresh.post(
                "/v1/videos", json={**JOB, "prompt": "late", "num_inference_steps": 2}
            )
        if response.status_code != 200:
            return response
        time.sleep(0.02)  # the signal is handled asynchronously: a request may still land
    raise AssertionError("no 503 after SIGTERM")


def test_serve_drain_ends_a_speech_stream_cleanly(checkpoints, tmp_path: Path) -> None:
    """The drain SIGTERM starts, with a speech stream in flight (an in-process server): the
    stream runs to its end in whole chunks, and a request sent meanwhile gets the 503 JSON."""
    if "tts" not in checkpoints.paths:
        pytest.skip(f"tts: {checkpoints.missing.get('tts')}")
    import threading

    from .conftest import server_config, start_server

    models = [{"id": "tts", "path": str(checkpoints.paths["tts"])}]
    live = start_server(server_config(checkpoints, tmp_path, models=models), checkpoints, tmp_path)
    try:
        voices = live.state.models["tts"].omni.pipeline.voices()
        body = {
            "model": "tts",
            "input": "a stream that outlives the signal " * 4,
            "voice": voices[0].id if voices else "default",
            "response_format": "pcm",
            "seed": 5,
        }
        with live.http() as client:
            whole = client.post("/v1/audio/speech", json=body).content
            with client.stream(
                "POST", "/v1/audio/speech", json={**body, "stream_format": "audio"}
            ) as response:
                assert response.status_code == 200
                chunks = response.iter_bytes()
                first = next(chunks)
                drain = threading.Thread(target=live.state.drain)
                drain.start()
                with live.http() as other:  # admissions stopped: 503, not a hang or a refusal
                    refused = other.get("/v1/models")
                assert refused.status_code == 503, refused.text
                assert refused.headers["retry-after"] == "5"
                assert refused.json()["error"]["code"] == "server_shutting_down"
                streamed = first + b"".join(chunks)
            drain.join(30)
        assert not drain.is_alive()
        assert streamed == whole  # every chunk, none cut
    finally:
        live.stop()
