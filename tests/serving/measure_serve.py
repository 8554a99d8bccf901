"""CPU measurements of the server with tiny checkpoints (not a test; run by hand):

    python tests/serving/measure_serve.py --out /tmp/serve_measure.json

1. Server overhead per request: median latency of sequential HTTP requests (httpx, one at a
   time) minus the median of the same request run directly on the pipeline (no engine, no HTTP).
2. Throughput with step-level batching on (--max-batch 8) vs off (--max-batch 1) at
   concurrency 8, with the same load generator as ``omni bench serve``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import conftest as harness


def _median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def overhead(live: Any, model: str, body: dict[str, Any], path: str, n: int) -> dict[str, Any]:
    from omni_core.runtime.staged import run_direct

    served = live.state.models[model]
    kwargs = dict(body)
    kwargs.pop("model")
    prompt = kwargs.pop("prompt", None) or kwargs.pop("input")
    kwargs.pop("response_format", None)
    size = kwargs.pop("size", None)
    if size:
        w, h = (int(v) for v in size.split("x"))
        kwargs.update(width=w, height=h)
    request = served.omni.request(prompt, **kwargs)
    direct = []
    for _ in range(n):
        t0 = time.perf_counter()
        run_direct(served.omni.pipeline, request)
        direct.append(time.perf_counter() - t0)
    http = []
    with live.http() as client:
        for _ in range(n):
            t0 = time.perf_counter()
            response = client.post(path, json=body)
            http.append(time.perf_counter() - t0)
            assert response.status_code == 200, response.text
    return {
        "model": model,
        "requests": n,
        "direct_ms_p50": _median_ms(direct),
        "http_ms_p50": _median_ms(http),
        "overhead_ms_p50": _median_ms(http) - _median_ms(direct),
    }


def throughput(
    ckpts: Any,
    state: Path,
    max_batch: int,
    task: str,
    model: str,
    prompts: int,
    extra: dict[str, Any],
) -> dict[str, Any]:
    from omni_core.bench.serve import BenchConfig, BenchRunner

    config = harness.server_config(
        ckpts, state, max_batch=max_batch, max_queue=256, max_pixels=None, max_steps=None
    )
    live = harness.start_server(config, ckpts, state)
    try:
        bench = BenchConfig(
            base_url=live.url,
            task=task,
            model=model,
            num_prompts=prompts,  # type: ignore[arg-type]
            max_concurrency=8,
            warmup_requests=2,
            api_key=live.api_key,
            **extra,
        )
        summary = asyncio.run(BenchRunner(bench).run())
    finally:
        live.stop()
    summary.pop("requests")
    return {"max_batch": max_batch, **summary}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="Alternate batching off/on this many times; report each run.",
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(2)
    root = Path(tempfile.mkdtemp())
    ckpts = harness.Checkpoints()
    harness._build(ckpts, "wan", root, "omni_wan.testing", "build_tiny_wan", variant="t2v")
    harness._build(ckpts, "qwen", root, "omni_qwen.testing", "build_tiny_qwen_image", variant="t2i")
    harness._build(ckpts, "tts", root, "omni_tts.testing", "build_tiny_tts", family="vits")
    results: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "torch_threads": 2,
        "load_avg": os.getloadavg(),
    }

    state = root / "state"
    live = harness.start_server(harness.server_config(ckpts, state), ckpts, state)
    try:
        results["overhead"] = [
            overhead(
                live,
                "qwen",
                {
                    "model": "qwen",
                    "prompt": "a fox",
                    "size": "64x64",
                    "num_inference_steps": 4,
                    "seed": 1,
                },
                "/v1/images/generations",
                args.n,
            ),
            overhead(
                live,
                "tts",
                {"model": "tts", "input": "hello there", "seed": 1, "response_format": "wav"},
                "/v1/audio/speech",
                args.n,
            ),
        ]
    finally:
        live.stop()
    results["throughput"] = []
    for task, model, extra in (
        ("t2i", "qwen", {"size": "64x64", "steps": 8}),
        ("t2v", "wan", {"size": "32x32", "steps": 8, "num_frames": 5}),
    ):
        for repeat in range(args.repeats):
            for max_batch in (1, 8):
                results["throughput"].append(
                    throughput(
                        ckpts,
                        root / f"state-{task}-{max_batch}-{repeat}",
                        max_batch,
                        task,
                        model,
                        args.prompts,
                        extra,
                    )
                )
    args.out.write_text(json.dumps(results, indent=2))
    for row in results["overhead"]:
        print(
            f"overhead {row['model']}: direct {row['direct_ms_p50']:.1f} ms, HTTP "
            f"{row['http_ms_p50']:.1f} ms, overhead {row['overhead_ms_p50']:.1f} ms (p50)"
        )
    for row in results["throughput"]:
        print(
            f"{row['task']} max_batch={row['max_batch']}: {row['throughput_rps']:.2f} req/s, "
            f"p50 {row['latency_ms']['p50']:.0f} ms, p99 {row['latency_ms']['p99']:.0f} ms, "
            f"completed {row['completed']}, rejected {row['rejected']}, failed {row['failed']}"
        )
    for task in ("t2i", "t2v"):
        for max_batch in (1, 8):
            rates = [
                r["throughput_rps"]
                for r in results["throughput"]
                if r["task"] == task and r["max_batch"] == max_batch
            ]
            print(
                f"{task} max_batch={max_batch}: median {statistics.median(rates):.2f} req/s "
                f"over {len(rates)} runs"
            )


if __name__ == "__main__":
    main()
