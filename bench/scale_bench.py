"""Scale-out of video jobs: N jobs through one ``omni serve`` (one device), then through one
server per device sharing one job store and output store, every job POSTed to the first server
(the others take what it has no room for). Both phases run the same checkpoint and requests in
one run, so the speed-up is measured against the single server as reference.

    source bench/gpu_env.sh
    python3 bench/scale_bench.py --workload wan2.2-ti2v-5b-704x1280x121 --devices cuda:0,cuda:1 \\
        --jobs 8 --size 704x1280 --frames 49 --steps 10 --out $OUT/scale.json
    python3 bench/scale_bench.py --devices cpu,cpu --jobs 6 --out /tmp/scale.json   # CPU smoke

The job store is the state dir's SQLite file (the GPU machine has no PostgreSQL; the code path
of a shared store is the same: claims, leases, the shared output folder). ``--job-store
postgresql://...`` uses a PostgreSQL server instead where one runs.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _http() -> Any:
    import httpx

    return httpx


def _start(args: argparse.Namespace, ckpt: Path, device: str, state: Path, log: Path) -> Any:
    port = _port()
    warmup = {"width": args.width, "height": args.height, "num_frames": args.frames}
    cmd = [sys.executable, "-c", "from omni_core.cli import main; main()", "serve"]
    cmd += [f"wan={ckpt}", "--port", str(port), "--device", device, "--state-dir", str(state)]
    cmd += ["--max-batch", "1", "--max-queue", str(max(64, args.jobs)), "--log-level", "warning"]
    cmd += ["--warmup-request", json.dumps({**warmup, "num_inference_steps": 2})]
    cmd += ["--max-steps", "0", "--max-frames", "0", "--max-pixels", "0"]
    if args.job_store:
        cmd += ["--job-store", args.job_store]
    proc = subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + args.load_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server on {device} exited:\n{log.read_text()[-3000:]}")
        try:
            if _http().get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except _http().HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"server on {device} not ready in {args.load_timeout} s")


def _phase(args: argparse.Namespace, ckpt: Path, devices: list[str], work: Path) -> dict:
    state = work / f"state-{len(devices)}"
    logs = [work / f"server-{len(devices)}-{i}.log" for i in range(len(devices))]
    servers: list[Any] = []
    try:
        for device, log in zip(devices, logs, strict=True):
            servers.append(_start(args, ckpt, device, state, log))
        body = {"model": "wan", "prompt": "a red fox running through snow", "seed": 1}
        body |= {"size": f"{args.width}x{args.height}", "num_frames": args.frames}
        body["num_inference_steps"] = args.steps
        first = servers[0][1]
        with _http().Client(base_url=first, timeout=120) as client:
            started = time.perf_counter()
            ids = []
            for _ in range(args.jobs):
                response = client.post("/v1/videos", json=body)
                response.raise_for_status()
                ids.append(response.json()["id"])
            done: dict[str, float] = {}
            while len(done) < len(ids):
                for job_id in ids:
                    if job_id in done:
                        continue
                    job = client.get(f"/v1/videos/{job_id}").json()
                    if job["status"] in ("completed", "failed", "cancelled"):
                        if job["status"] != "completed":
                            raise SystemExit(f"job {job_id}: {job}")
                        done[job_id] = time.perf_counter() - started
                time.sleep(0.2)
            wall = time.perf_counter() - started
    finally:
        for proc, _ in servers:
            proc.terminate()
        for proc, _ in servers:
            proc.wait(120)
    from omni_core.serving.stores import open_job_store

    store = open_job_store(args.job_store, state)
    owners: dict[str, int] = {}
    for job_id in ids:
        owner = store.get(job_id).owner or "?"
        owners[owner] = owners.get(owner, 0) + 1
    store.close()
    return {
        "servers": len(devices),
        "devices": devices,
        "jobs": args.jobs,
        "wall_s": round(wall, 3),
        "jobs_per_min": round(60 * args.jobs / wall, 3),
        "mean_latency_s": round(sum(done.values()) / len(done), 3),
        "jobs_by_server": sorted(owners.values(), reverse=True),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="tiny-wan", help="a registered Wan benchmark")
    parser.add_argument("--devices", default="cpu,cpu", help="one server per device")
    parser.add_argument("--jobs", type=int, default=6)
    parser.add_argument("--size", default=None, help="WxH (default: the workload's)")
    parser.add_argument("--frames", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--job-store", default=None, help="default: the state dir's SQLite")
    parser.add_argument("--load-timeout", type=float, default=900)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    try:
        import omni_core  # noqa: F401
    except ImportError:  # a bare checkout
        sys.path.insert(0, str(ROOT / "core/src"))
        sys.path.insert(0, str(ROOT / "plugins/omni-wan/src"))
    from omni_core.bench.runner import select_workloads
    from omni_core.contract.host import get_registry

    ((_, workload),) = select_workloads(get_registry(), [args.workload])
    request = workload.request()
    if args.size:
        args.width, args.height = (int(v) for v in args.size.lower().split("x"))
    else:
        args.width, args.height = request["width"], request["height"]
    args.frames = args.frames or request["num_frames"]
    args.steps = args.steps or request["num_inference_steps"]
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    with tempfile.TemporaryDirectory(prefix="omni-scale-") as tmp:
        work = Path(tmp)
        ckpt = work / "wan"
        workload.build_checkpoint(ckpt)
        single = _phase(args, ckpt, devices[:1], work)
        shared = _phase(args, ckpt, devices, work)
    result = {
        "workload": args.workload,
        "request": {"size": f"{args.width}x{args.height}", "frames": args.frames},
        "steps": args.steps,
        "single_server": single,
        "shared_store": shared,
        "speedup": round(single["wall_s"] / shared["wall_s"], 3),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
