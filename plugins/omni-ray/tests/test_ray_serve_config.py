"""The KubeRay path for real: ``serve run`` of a Ray Serve config whose application is
``omni_ray.app:build`` (what a RayService runs), with two models: a tiny Wan that autoscales on
queue depth (1 to 2 replicas) and a tiny VITS voice. The ingress routes by ``model`` (and by
modality when none is named), lists both models, and relays a streamed speech response.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from omni_core.testing import free_port, open_job_store, spawn, wait_until

pytest.importorskip("ray.serve", reason="omni-ray's tests need ray[serve]: run `nox -s ray`")

pytestmark = pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")


@pytest.fixture(scope="module")
def tiny_tts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_tts.testing import build_tiny_tts

    return build_tiny_tts(tmp_path_factory.mktemp("tts") / "tts")


def _replicas(url: str, model: str) -> int:
    health = httpx.get(f"{url}/health", timeout=5).json()
    states = health.get("replicas", {}).get(model, {})
    return sum(1 for s in states.values() if s == "ready")


def test_ray_serve_run_builder_autoscales_routes_and_streams(
    tiny_wan: Path, tiny_tts: Path, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    warmup = {"width": 32, "height": 32, "num_frames": 5, "num_inference_steps": 1}
    app_args = {
        "server": {"state_dir": str(tmp_path / "state"), "max_batch": 1, "warmup_request": warmup},
        "models": [
            {
                "id": "wan",
                "path": str(tiny_wan),
                "min_replicas": 1,
                "max_replicas": 2,
                "target_queue_per_replica": 1,
                "cpus_per_replica": 0.5,
            },
            {"id": "tts", "path": str(tiny_tts), "cpus_per_replica": 0.5},
        ],
    }
    config = {
        "http_options": {"host": "127.0.0.1", "port": port},
        "applications": [
            {
                "name": "omni",
                "route_prefix": "/",
                "import_path": "omni_ray.app:build",
                "args": app_args,
            }
        ],
    }
    path = tmp_path / "serve.json"  # YAML is JSON: serve run reads it
    path.write_text(json.dumps(config))
    log = tmp_path / "serve.log"
    serve_cli = str(Path(sys.executable).with_name("serve"))
    proc = spawn([serve_cli, "run", str(path)], log, RAY_USAGE_STATS_ENABLED="0")
    try:
        wait_until(
            "both models ready",
            lambda: (
                httpx.get(f"{url}/health", timeout=5).status_code == 200
                and httpx.get(f"{url}/v1/models", timeout=5).status_code == 200
            ),
            log,
        )
        models = httpx.get(f"{url}/v1/models").json()["data"]
        assert sorted(m["id"] for m in models) == ["tts", "wan"]
        assert _replicas(url, "wan") == 1

        # A streamed speech response through the ingress: SSE events, then the done event.
        events = []
        with httpx.stream(
            "POST",
            f"{url}/v1/audio/speech",
            json={"model": "tts", "input": "Hello there. How are you today?", "stream": True},
            timeout=120,
        ) as response:
            assert response.status_code == 200, response.read()
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
        kinds = [e["type"] for e in events]
        assert "speech.audio.delta" in kinds and kinds[-1] == "speech.audio.done", kinds

        # Video work piles up in the store (40 jobs: ~30 s for one replica of the tiny model on
        # 2 CPU cores): the wan deployment grows to its max of 2.
        with httpx.Client(base_url=url, timeout=60) as client:
            ids = []
            for i in range(40):
                body = {"prompt": f"fox {i}", "size": "32x32", "num_frames": 5}
                body["num_inference_steps"] = 200
                created = client.post("/v1/videos", json=body)  # no model: the video one
                assert created.status_code == 200, created.text
                assert created.json()["model"] == "wan"
                ids.append(created.json()["id"])
            wait_until("wan scaled to 2 replicas", lambda: _replicas(url, "wan") == 2, log, 180)
            # A second wave once both replicas are up: should the first replica have drained the
            # first wave while the second was still loading (a fast machine, a slow start), the
            # added replica still polls the store every second and must take part of this one.
            for i in range(8):
                body = {"prompt": f"owl {i}", "size": "32x32", "num_frames": 5}
                body["num_inference_steps"] = 200
                created = client.post("/v1/videos", json=body)
                assert created.status_code == 200, created.text
                ids.append(created.json()["id"])
            for video_id in ids:
                wait_until(
                    f"{video_id} completed",
                    lambda v=video_id: (
                        client.get(f"/v1/videos/{v}").json()["status"] == "completed"
                    ),
                    log,
                )
            store = open_job_store(None, tmp_path / "state")
            owners = {store.get(v).owner for v in ids}
            store.close()
            assert len(owners) == 2, owners  # the replica added took its share of the queue
            unknown = client.post("/v1/audio/speech", json={"model": "nope", "input": "x"})
            assert unknown.status_code == 404
            assert unknown.json()["error"]["code"] == "model_not_found"
            # DNS rebinding: the ingress is on loopback (the builder's default host), so a
            # page's own host name in Host is refused by the replica, in omni's words.
            rebound = client.post(
                "/v1/audio/speech",
                json={"model": "tts", "input": "x"},
                headers={"Host": "attacker.example"},
            )
            assert rebound.status_code == 421, rebound.text
            assert rebound.json()["error"]["code"] == "invalid_host"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # serve run's Ctrl+C: shuts the application down
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
