"""``omni deploy ray`` for real, on CPU: a local Ray cluster, 2 replicas of a tiny Wan model
behind the ingress, the official openai client. Requests spread over both replicas; a video
job accepted by one replica finishes on the other after the first is killed; nothing accepted
is lost; /health and /metrics speak for every replica; SIGTERM drains and exits. Run against
the default SQLite store and folder (one host), and a real PostgreSQL server with a real
S3-compatible server (moto's) as the output store.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from omni_core.testing import free_port, omni_command, spawn, wait_until

pytest.importorskip("ray.serve", reason="omni-ray's tests need ray[serve]: run `nox -s ray`")

# The openai SDK warns on every videos call that OpenAI's own video API is going away; omni's
# /v1/videos stays.
pytestmark = pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")

WARMUP = json.dumps({"width": 32, "height": 32, "num_frames": 5, "num_inference_steps": 1})
VIDEO = {"num_frames": 5, "num_inference_steps": 2}


def _deploy(wan: Path, state: Path, port: int, log: Path, *extra: str) -> Any:
    args = ["deploy", "ray", f"wan={wan}", "--replicas", "2", "--cpus-per-replica", "0.5"]
    args += ["--port", str(port), "--state-dir", str(state), "--max-batch", "1"]
    return spawn(
        omni_command(*args, "--warmup-request", WARMUP, *extra), log, RAY_USAGE_STATS_ENABLED="0"
    )


def _ready(url: str) -> Any:
    health = httpx.get(f"{url}/health", timeout=5)
    if health.status_code != 200:
        return None
    replicas = health.json()["replicas"]["wan"]
    if len(replicas) != 2 or set(replicas.values()) != {"ready"}:
        return None
    # and the proxy routes to the application (its route table follows the deployment)
    return health.json() if httpx.get(f"{url}/v1/models", timeout=5).status_code == 200 else None


@pytest.fixture(params=["sqlite+folder", "postgresql+s3"])
def store(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """The deployment's store flags: none (the state dir's SQLite file and folder, shared by
    the replicas of this host), or a real PostgreSQL server and a real S3-compatible server."""
    if request.param == "sqlite+folder":
        return ()
    from urllib.parse import urlsplit

    import pg8000.dbapi

    from omni_core.testing import make_bucket, s3_server

    s3 = s3_server()
    endpoint = s3.__enter__()  # sets dummy credentials in os.environ: the replicas inherit them
    request.addfinalizer(lambda: s3.__exit__(None, None, None))

    url = request.getfixturevalue("postgres_url")
    conn = pg8000.dbapi.connect(user="postgres", host="127.0.0.1", port=urlsplit(url).port)
    conn.autocommit = True
    conn.cursor().execute("DROP DATABASE IF EXISTS omni_ray")
    conn.cursor().execute("CREATE DATABASE omni_ray")
    conn.close()
    database = url.rsplit("/", 1)[0] + "/omni_ray"
    return ("--job-store", database, "--output-store", make_bucket(endpoint, "omni-ray"))


def test_ray_deploy_two_replicas_share_and_survive(tiny_wan, store, tmp_path: Path) -> None:
    import openai

    from omni_core.testing import open_job_store

    state, log, port = tmp_path / "state", tmp_path / "deploy.log", free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _deploy(tiny_wan, state, port, log, *store)
    jobs = None
    try:
        health = wait_until("both replicas ready", lambda: _ready(url), log)
        assert health["models"] == {"wan": "ready"}
        jobs = open_job_store(store[1] if store else None, state)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
        assert [m.id for m in client.models.list().data] == ["wan"]

        # Requests spread over both replicas (each takes one job at a time: --max-batch 1).
        # A replica that finishes a job claims the next one at once, the other looks at the
        # store once a second: the four jobs together must outlast that look on a fast machine
        # too (60 steps did not, once), so each has the most steps omni serve allows by
        # default (200).
        longer = {**VIDEO, "num_inference_steps": 200}
        created = [
            client.videos.create(model="wan", prompt=f"fox {i}", size="32x32", extra_body=longer)
            for i in range(4)
        ]
        for job in created:
            wait_until(
                f"{job.id} completed",
                lambda j=job: client.videos.retrieve(j.id).status == "completed",
                log,
            )
        owners = {jobs.get(job.id).owner for job in created}
        assert len(owners) == 2, owners
        mp4 = client.videos.download_content(created[0].id).content
        assert mp4[4:8] == b"ftyp"
        # with S3 the content came from the bucket: the state dir holds no videos
        assert (state / "videos").is_dir() == (not store)

        # The same error bodies as omni serve, from the replica or the ingress.
        with pytest.raises(openai.BadRequestError) as bad:
            client.videos.create(model="wan", prompt="x", size="99999x3")
        assert bad.value.body["code"] == "invalid_value" and bad.value.body["param"] == "size"
        unknown = httpx.post(f"{url}/v1/videos", json={"model": "nope", "prompt": "x"})
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "model_not_found"

        # Prometheus metrics of every replica, labelled with it.
        metrics = httpx.get(f"{url}/metrics").text
        for replica in health["replicas"]["wan"]:
            assert f'omni_model_ready{{model="wan",replica="{replica}"}} 1.0' in metrics

        # A long job: its replica is killed mid-run; the other replica runs it again.
        long = client.videos.create(
            model="wan",
            prompt="long",
            size="32x32",
            extra_body={**VIDEO, "num_inference_steps": 150},
        )
        wait_until(
            "long job running",
            lambda: client.videos.retrieve(long.id).progress > 0,
            log,
        )
        owner = jobs.get(long.id).owner
        os.kill(int(owner.split(":")[1]), signal.SIGKILL)
        done = wait_until(
            "long job re-run elsewhere",
            lambda: (v := client.videos.retrieve(long.id)).status in ("completed", "failed") and v,
            log,
        )
        assert done.status == "completed", done
        assert jobs.get(long.id).owner != owner
        assert client.videos.download_content(long.id).content[4:8] == b"ftyp"
        listed = {v.id for v in client.videos.list(limit=100).data}
        assert {j.id for j in created} | {long.id} <= listed  # nothing accepted was lost
        wait_until("the killed replica replaced", lambda: _ready(url), log)
    finally:
        if jobs is not None:
            jobs.close()
        if proc.poll() is None:
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
                raise AssertionError(f"no exit after SIGTERM\n{log.read_text()[-4000:]}") from None
            assert time.monotonic() - started < 120
    assert proc.returncode == 0, log.read_text()[-4000:]
    assert "omni: stopped after" in log.read_text()
