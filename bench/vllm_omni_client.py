"""Run vLLM-Omni's own diffusion benchmark client, unchanged, against `omni serve`.

vLLM-Omni's `benchmarks/diffusion/backends.py` holds the request functions its serving benchmark
(`diffusion_benchmark_serving.py`) sends: `/v1/chat/completions` (t2i, i2i),
`/v1/images/generations`, `/v1/images/edits` (multipart, `bot_task`) and `/v1/videos` (multipart
job, polled, content fetched, deleted). This script does not copy them: it imports that file
from a vLLM-Omni checkout (`--backends PATH`), builds its `RequestFuncInput`s the way the
benchmark's VBench dataset does (the prompt, `--width/--height/--num-frames/--fps/--steps/
--seed`, a dummy 100x100 JPEG for i2i/i2v as the benchmark makes when it has no data set) and
runs each backend at each concurrency with a semaphore, as the benchmark does. It needs
`aiohttp`, `tqdm`, `requests` and `numpy` (the client's own imports).

With `--tiny-serve` it builds tiny random-weight Wan TI2V, Qwen-Image and Qwen-Image-Edit
checkpoints (the plugins' builders, real layout) in `--work-dir` and starts `omni serve` on them
(CPU is enough; `--serve-python` names a Python with omni when the client's has none);
otherwise it targets `--base-url` and the model ids given.

    python3 bench/vllm_omni_client.py --backends VLLM_OMNI/benchmarks/diffusion/backends.py \\
        --tiny-serve --work-dir /tmp/vbench --concurrency 1 4 --num-prompts 4 \\
        --out bench/results/vllm-omni-client-cpu.json
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: (task, endpoint, model role): every request shape the client sends.
TASKS = (
    ("t2i", "/v1/chat/completions", "image"),
    ("i2i", "/v1/chat/completions", "edit"),
    ("t2i", "/v1/images/generations", "image"),
    ("i2i", "/v1/images/edits", "edit"),
    ("t2v", "/v1/videos", "video"),
    ("i2v", "/v1/videos", "video"),
)
PROMPTS = (
    "a person is walking on the beach",
    "a cat sitting on a bench",
    "a red car driving through the rain",
    "a lighthouse at dusk",
)


def load_backends(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("vllm_omni_backends", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dummy_image(work_dir: Path) -> str:
    """The benchmark's own fallback image when it has no I2V data set: 100x100 red JPEG."""
    from PIL import Image

    path = work_dir / "dummy_image.jpg"
    if not path.exists():
        Image.new("RGB", (100, 100), color="red").save(path)
    return str(path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tiny_serve(work_dir: Path, args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], str]:
    """Build the tiny checkpoints and start `omni serve` on them; returns (process, base URL)."""
    ckpts = work_dir / "ckpts"
    paths = {"wan": ckpts / "wan", "qwen": ckpts / "qwen", "qwen-edit": ckpts / "qwen-edit"}
    build = (
        "import sys; from pathlib import Path\n"
        "from omni_qwen.testing import build_tiny_qwen_image\n"
        "from omni_wan.testing import build_tiny_wan\n"
        "root = Path(sys.argv[1])\n"
        "build_tiny_wan(root / 'wan', variant='ti2v')\n"
        "build_tiny_qwen_image(root / 'qwen', variant='t2i')\n"
        "build_tiny_qwen_image(root / 'qwen-edit', variant='edit-plus')\n"
    )
    if not all(p.exists() for p in paths.values()):
        subprocess.run([args.serve_python, "-c", build, str(ckpts)], check=True)
    port = free_port()
    warmup = {"width": args.width, "height": args.height, "num_frames": 5, "num_inference_steps": 2}
    cmd = [
        args.serve_python,
        "-c",
        "from omni_core.cli import main; main()",
        "serve",
        *(f"{k}={v}" for k, v in paths.items()),
        "--port",
        str(port),
        "--state-dir",
        str(work_dir / "state"),
        "--warmup-request",
        json.dumps(warmup),
        "--log-level",
        "warning",
    ]
    log = (work_dir / "serve.log").open("ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    import urllib.request

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"omni serve exited {proc.returncode}; see {work_dir / 'serve.log'}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return proc, url
        except OSError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("omni serve did not become healthy")


def check_output(endpoint: str, body: Any) -> str:
    """What a successful answer holds ("32x32 png", "mp4 of N bytes"); raises if it is not a
    real image or video."""
    import base64
    import io

    from PIL import Image

    if endpoint == "/v1/videos":
        if not isinstance(body, bytes) or body[4:8] != b"ftyp":
            raise ValueError(f"not an MP4: {body[:16]!r}")
        return f"mp4 of {len(body)} bytes"
    if endpoint == "/v1/chat/completions":
        url = body["choices"][0]["message"]["content"][0]["image_url"]["url"]
        data = base64.b64decode(url.partition(",")[2])
    else:
        data = base64.b64decode(body["data"][0]["b64_json"])
    with Image.open(io.BytesIO(data)) as image:
        return f"{image.width}x{image.height} {image.format.lower()}"


async def run_task(
    backends: Any,
    base_url: str,
    task: str,
    endpoint: str,
    model: str,
    concurrency: int,
    args: argparse.Namespace,
    image: str,
) -> dict[str, Any]:
    import aiohttp

    kind = "2v" if task.endswith("v") else "2i"
    func, path = backends.backends_function_mapping[kind][endpoint]
    inputs = [
        backends.RequestFuncInput(
            prompt=PROMPTS[i % len(PROMPTS)],
            api_url=f"{base_url}{path}",
            model=model,
            width=args.width,
            height=args.height,
            num_frames=args.num_frames if kind == "2v" else None,
            num_inference_steps=args.steps,
            seed=args.seed,
            fps=args.fps if kind == "2v" else None,
            image_paths=[image] if task.startswith("i") else None,
        )
        for i in range(args.num_prompts)
    ]
    semaphore = asyncio.Semaphore(concurrency)

    async def limited(req: Any, session: Any) -> Any:
        async with semaphore:
            return await func(req, session, None)

    t0 = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        outputs = await asyncio.gather(*(limited(r, session) for r in inputs))
    duration = time.perf_counter() - t0
    outputs_seen: set[str] = set()
    for output in outputs:
        if output.success:
            try:
                outputs_seen.add(check_output(endpoint, output.response_body))
            except (KeyError, IndexError, TypeError, ValueError, OSError) as exc:
                output.success, output.error = False, f"200 without a real output: {exc}"
    ok = [o for o in outputs if o.success]
    return {
        "task": task,
        "endpoint": endpoint,
        "model": model,
        "concurrency": concurrency,
        "requests": len(outputs),
        "completed": len(ok),
        "duration_s": round(duration, 3),
        "latency_mean_s": round(sum(o.latency for o in ok) / len(ok), 3) if ok else None,
        "outputs": sorted(outputs_seen),
        "errors": sorted({o.error[:300] for o in outputs if not o.success}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", type=Path, required=True, help="vLLM-Omni's backends.py")
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--tiny-serve", action="store_true")
    parser.add_argument(
        "--serve-python",
        default=sys.executable,
        help="Python with omni installed, for --tiny-serve (the client's may lack it)",
    )
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/vllm-omni-client"))
    parser.add_argument("--image-model", default="qwen")
    parser.add_argument("--edit-model", default="qwen-edit")
    parser.add_argument("--video-model", default="wan")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--num-prompts", type=int, default=4)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--height", type=int, default=32)
    parser.add_argument("--num-frames", type=int, default=8, help="Wan rounds it to 4k+1")
    parser.add_argument("--fps", type=int, default=24)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if not args.tiny_serve and not args.base_url:
        parser.error("give --base-url or --tiny-serve")

    backends = load_backends(args.backends)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    image = dummy_image(args.work_dir)
    proc = None
    base_url = args.base_url
    if args.tiny_serve:
        proc, base_url = tiny_serve(args.work_dir, args)
    models = {"image": args.image_model, "edit": args.edit_model, "video": args.video_model}
    rows: list[dict[str, Any]] = []
    try:
        for task, endpoint, role in TASKS:
            for concurrency in args.concurrency:
                row = asyncio.run(
                    run_task(
                        backends, base_url, task, endpoint, models[role], concurrency, args, image
                    )
                )
                rows.append(row)
                print(
                    f"{task:4} {endpoint:24} c={concurrency}: {row['completed']}/{row['requests']}"
                    f" in {row['duration_s']} s {row['outputs']} {row['errors'][:1]}",
                    flush=True,
                )
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(120)
    result = {
        "command": " ".join(sys.argv),
        "client": str(args.backends),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "settings": {
            k: getattr(args, k)
            for k in ("width", "height", "num_frames", "fps", "steps", "seed", "num_prompts")
        },
        "rows": rows,
        "completed": sum(r["completed"] for r in rows),
        "requests": sum(r["requests"] for r in rows),
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"completed {result['completed']}/{result['requests']}")
    if result["completed"] != result["requests"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
