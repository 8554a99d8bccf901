"""What the Ray Serve ingress adds per request: median latency of GET /v1/models, GET
/v1/videos/{id} and its /content through ``omni serve`` and through ``omni deploy ray`` (one
replica), the same tiny Wan checkpoint, in one run. Needs ray[serve] (omni-ray's venv).

    python3 bench/ray_hop_bench.py --out /tmp/ray-hop.json
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from omni_core.testing.services import free_port, omni_command, spawn, wait_until

WARMUP = json.dumps({"width": 32, "height": 32, "num_frames": 5, "num_inference_steps": 1})
JOB = {"model": "wan", "prompt": "x", "size": "32x32", "num_frames": 5, "num_inference_steps": 2}


def _ready(url: str) -> bool:
    """Loaded and warmed (/health), and routed (the Ray proxy's table follows the app)."""
    if httpx.get(f"{url}/health", timeout=5).status_code != 200:
        return False
    return httpx.get(f"{url}/v1/models", timeout=5).status_code == 200


def _measure(url: str, reps: int) -> dict[str, float]:
    with httpx.Client(base_url=url, timeout=30) as client:
        created = client.post("/v1/videos", json=JOB)
        assert created.status_code == 200, created.text
        job = created.json()
        done = lambda: client.get(f"/v1/videos/{job['id']}").json()["status"] == "completed"  # noqa: E731
        wait_until("the job", done)
        medians = {}
        for name, path in (
            ("models", "/v1/models"),
            ("video", f"/v1/videos/{job['id']}"),
            ("content", f"/v1/videos/{job['id']}/content"),
        ):
            for _ in range(20):  # warm the connection and the routes
                client.get(path)
            times = []
            for _ in range(reps):
                start = time.perf_counter()
                assert client.get(path).status_code == 200
                times.append((time.perf_counter() - start) * 1000)
            medians[f"{name}_ms"] = round(statistics.median(times), 2)
        return medians


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from omni_wan.testing import build_tiny_wan

    result = {}
    with tempfile.TemporaryDirectory(prefix="omni-hop-") as tmp:
        work = Path(tmp)
        wan = build_tiny_wan(work / "wan", variant="ti2v")
        for name, cmd in (
            ("omni serve", ["serve", f"wan={wan}", "--log-level", "warning"]),
            ("omni deploy ray", ["deploy", "ray", f"wan={wan}", "--cpus-per-replica", "0.5"]),
        ):
            port, state = free_port(), work / name.replace(" ", "-")
            argv = omni_command(*cmd, "--port", str(port), "--state-dir", str(state))
            proc = spawn(
                [*argv, "--warmup-request", WARMUP], work / "log", RAY_USAGE_STATS_ENABLED="0"
            )
            url = f"http://127.0.0.1:{port}"
            try:
                wait_until(name, lambda u=url: _ready(u), work / "log", timeout=300)
                result[name] = _measure(url, args.reps)
            finally:  # never leave a server behind
                proc.send_signal(signal.SIGTERM)
                proc.wait(120)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
