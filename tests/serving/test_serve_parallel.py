"""`omni serve --cfg-parallel-size 2` for real: two gloo worker processes behind one server.

A job completes; a worker killed with SIGKILL turns /health into a 503 that names the failure;
SIGTERM then leaves no worker process behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from omni_core.testing.services import wait_until

WARMUP = json.dumps({"width": 32, "height": 32, "num_frames": 5, "num_inference_steps": 2})


def test_serve_cfg_parallel_workers(checkpoints, tmp_path: Path) -> None:
    if "wan" not in checkpoints.paths:
        pytest.skip(f"wan: {checkpoints.missing.get('wan')}")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("CFG-parallel on CPU needs two cores (one gloo worker each)")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url, log = f"http://127.0.0.1:{port}", tmp_path / "server.log"
    cmd = [
        sys.executable, "-c", "from omni_core.cli import main; main()", "serve",
        f"wan={checkpoints.paths['wan']}", "--port", str(port), "--state-dir",
        str(tmp_path / "state"), "--cfg-parallel-size", "2", "--warmup-request", WARMUP,
        "--log-level", "warning",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    server = psutil.Process(proc.pid)
    try:
        wait_until("health 200", lambda: httpx.get(f"{url}/health").status_code == 200, log, 300)
        workers = [p for p in server.children(recursive=True) if p.is_running()]
        assert len([p for p in workers if "python" in p.name().lower()]) >= 2, workers
        with httpx.Client(base_url=url, timeout=60) as client:
            job = client.post(
                "/v1/videos",
                json={"model": "wan", "prompt": "a fox", "size": "32x32", "num_frames": 5,
                      "num_inference_steps": 2, "seed": 1},
            ).json()  # fmt: skip
            done = wait_until(
                "the parallel job",
                lambda: client.get(f"/v1/videos/{job['id']}").json()["status"] == "completed",
                log, 180,
            )  # fmt: skip
            assert done
            assert client.get(f"/v1/videos/{job['id']}/content").content[4:8] == b"ftyp"
            workers[-1].kill()  # one rank dies
            unhealthy = wait_until(
                "health 503 after a worker died",
                lambda: (r := client.get("/health")).status_code == 503 and r.json(),
                log, 60,
            )  # fmt: skip
            assert unhealthy["models"]["wan"] == "failed"
            assert unhealthy["errors"]["wan"], unhealthy
    finally:
        children = server.children(recursive=True)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, f"worker processes left behind: {alive}"
