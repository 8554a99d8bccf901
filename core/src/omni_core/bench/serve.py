"""Load generator for a running omni server (``omni bench serve``).

Requests arrive as a Poisson process (``request_rate`` per second, or all at once with ``inf``),
at most ``max_concurrency`` in flight, after ``warmup_requests`` unmeasured ones. It reports
throughput, latency percentiles and SLO attainment, and for speech the time to the first audio
byte and the real-time factor. A 429 counts as "rejected", not as a failure of the server.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Task = Literal["t2i", "i2i", "t2v", "tts", "chat-t2i", "chat-i2i", "realtime"]
#: The modality each task needs; chat-* drive /v1/chat/completions (vLLM-Omni's image path).
MODALITY = {
    "t2i": "image",
    "i2i": "image",
    "chat-t2i": "image",
    "chat-i2i": "image",
    "t2v": "video",
    "tts": "speech",
    "realtime": "chat",
}

_SUBJECTS = [
    "a red fox",
    "a lighthouse",
    "a bowl of ramen",
    "a vintage car",
    "a mountain lake",
    "a robot barista",
    "an old library",
    "a koi pond",
    "a city at night",
    "a sailboat",
]
_STYLES = ["watercolor", "photograph", "oil painting", "pixel art", "studio lighting"]
_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Streaming speech lets a voice start before the sentence ends.",
    "Omni serves images, videos and speech behind one API.",
    "Please hold while we connect your call.",
]


@dataclass
class BenchConfig:
    base_url: str
    task: Task
    num_prompts: int = 32
    max_concurrency: int = 8
    request_rate: float = math.inf
    warmup_requests: int = 1
    slo_ms: float | None = None
    model: str | None = None
    api_key: str | None = None
    size: str | None = None
    steps: int | None = None
    num_frames: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    timeout_s: float = 3600.0
    poll_interval_s: float = 0.05


@dataclass
class RequestRecord:
    index: int
    start_s: float
    latency_s: float
    status: Literal["ok", "rejected", "failed"]
    http_status: int | None = None
    error: str | None = None
    ttfb_s: float | None = None
    audio_s: float | None = None


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in [0, 100]); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _stats_ms(values: list[float]) -> dict[str, float | None]:
    return {
        "mean": statistics.fmean(values) * 1000 if values else None,
        "p50": _ms(percentile(values, 50)),
        "p90": _ms(percentile(values, 90)),
        "p99": _ms(percentile(values, 99)),
        "max": max(values) * 1000 if values else None,
    }


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def _input_png(size: str | None) -> bytes:
    from PIL import Image

    width, height = (int(v) for v in (size or "64x64").lower().split("x"))
    img = Image.new("RGB", (width, height))
    img.putdata(
        [
            ((x * 255) // max(width - 1, 1), (y * 255) // max(height - 1, 1), 128)
            for y in range(height)
            for x in range(width)
        ]
    )
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


class BenchRunner:
    """Run one benchmark against ``config.base_url``."""

    def __init__(self, config: BenchConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.image = _input_png(config.size) if config.task.endswith("i2i") else b""

    def _prompt(self, i: int) -> str:
        if self.config.task == "tts":
            return _SENTENCES[i % len(_SENTENCES)]
        return f"{_SUBJECTS[i % len(_SUBJECTS)]}, {_STYLES[(i // len(_SUBJECTS)) % 5]}"

    def _fields(self, i: int) -> dict[str, Any]:
        c = self.config
        body: dict[str, Any] = {"model": c.model, "seed": c.seed + abs(i)}
        if c.size:
            body["size"] = c.size
        if c.steps is not None:
            body["num_inference_steps"] = c.steps
        if c.num_frames is not None:
            body["num_frames"] = c.num_frames
        body.update(c.extra)
        return body

    def _chat(self, i: int) -> dict[str, Any]:
        """A chat body as vLLM-Omni's clients send it: knobs in a nested ``extra_body``."""
        knobs = {k: v for k, v in self._fields(i).items() if k != "model" and v is not None}
        content: list[dict[str, Any]] = [{"type": "text", "text": self._prompt(i)}]
        if self.config.task == "chat-i2i":
            url = "data:image/png;base64," + base64.b64encode(self.image).decode()
            content.append({"type": "image_url", "image_url": {"url": url}})
        return {
            "model": self.config.model,
            "messages": [{"role": "user", "content": content}],
            "extra_body": knobs,
        }

    async def pick_model(self, client: Any) -> str:
        response = await client.get("/v1/models")
        response.raise_for_status()
        models = response.json()["data"]
        modality = MODALITY[self.config.task]
        for m in models:
            if m.get("modality") == modality and (
                not self.config.task.endswith("i2i") or "i2i" in m.get("tasks", [])
            ):
                return str(m["id"])
        raise RuntimeError(
            f"the server serves no model for task {self.config.task}: {[m['id'] for m in models]}"
        )

    async def one(self, client: Any, i: int, t_origin: float) -> RequestRecord:
        c = self.config
        start = time.perf_counter()
        record = RequestRecord(index=i, start_s=start - t_origin, latency_s=0.0, status="ok")
        try:
            if c.task == "realtime":  # its own clock: from the commit (omni_core.bench.realtime)
                from omni_core.bench.realtime import realtime_turn

                await realtime_turn(c, record)
                return record
            if c.task == "t2i":
                body = {**self._fields(i), "prompt": self._prompt(i)}
                response = await client.post("/v1/images/generations", json=body)
                record.http_status = response.status_code
            elif c.task == "i2i":
                data = {k: str(v) for k, v in self._fields(i).items() if v is not None}
                data["prompt"] = self._prompt(i)
                response = await client.post(
                    "/v1/images/edits",
                    data=data,
                    files={"image": ("in.png", self.image, "image/png")},
                )
                record.http_status = response.status_code
            elif c.task in ("chat-t2i", "chat-i2i"):
                response = await client.post("/v1/chat/completions", json=self._chat(i))
                record.http_status = response.status_code
            elif c.task == "t2v":
                body = {**self._fields(i), "prompt": self._prompt(i)}
                response = await client.post("/v1/videos", json=body)
                record.http_status = response.status_code
                if response.status_code == 200:
                    response = await self._wait_video(client, response.json()["id"])
                    record.http_status = response.status_code
            else:
                body = {
                    "model": c.model,
                    "input": self._prompt(i),
                    "response_format": "pcm",
                    "stream": True,
                    "stream_format": "audio",
                    **c.extra,
                }
                async with client.stream("POST", "/v1/audio/speech", json=body) as response:
                    record.http_status = response.status_code
                    nbytes = 0
                    async for chunk in response.aiter_bytes():
                        if chunk and record.ttfb_s is None:
                            record.ttfb_s = time.perf_counter() - start
                        nbytes += len(chunk)
                    rate = int(response.headers.get("x-omni-sample-rate", "24000"))
                    record.audio_s = nbytes / 2 / rate
            if response.status_code == 429:
                record.status = "rejected"
            elif response.status_code != 200:
                record.status = "failed"
                record.error = response.text[:300]
        except Exception as exc:  # noqa: BLE001 - a benchmark records failures and goes on
            record.status = "failed"
            record.error = f"{type(exc).__name__}: {exc}"
        record.latency_s = time.perf_counter() - start
        return record

    async def _wait_video(self, client: Any, video_id: str) -> Any:
        interval = self.config.poll_interval_s
        while True:
            response = await client.get(f"/v1/videos/{video_id}")
            if response.status_code != 200:
                return response
            status = response.json()["status"]
            if status == "completed":
                return await client.get(f"/v1/videos/{video_id}/content")
            if status in ("failed", "cancelled"):
                response.status_code = 500
                return response
            await asyncio.sleep(interval)
            interval = min(interval * 1.5, 1.0)

    async def run(self) -> dict[str, Any]:
        import httpx

        c = self.config
        headers = {"Authorization": f"Bearer {c.api_key}"} if c.api_key else {}
        limits = httpx.Limits(max_connections=c.max_concurrency + 4)
        async with httpx.AsyncClient(
            base_url=c.base_url.rstrip("/"), headers=headers, timeout=c.timeout_s, limits=limits
        ) as client:
            if c.model is None:
                c.model = await self.pick_model(client)
            t0 = time.perf_counter()
            for i in range(c.warmup_requests):
                warm = await self.one(client, -1 - i, t0)
                if warm.status == "failed":
                    raise RuntimeError(f"warm-up request failed: {warm.error}")
            semaphore = asyncio.Semaphore(c.max_concurrency)

            async def limited(i: int, origin: float) -> RequestRecord:
                async with semaphore:
                    return await self.one(client, i, origin)

            tasks = []
            origin = time.perf_counter()
            for i in range(c.num_prompts):
                tasks.append(asyncio.create_task(limited(i, origin)))
                if math.isfinite(c.request_rate) and i < c.num_prompts - 1:
                    await asyncio.sleep(self.rng.expovariate(c.request_rate))
            records = await asyncio.gather(*tasks)
            duration = time.perf_counter() - origin
        return self.summarize(list(records), duration)

    def summarize(self, records: list[RequestRecord], duration: float) -> dict[str, Any]:
        c = self.config
        ok = [r for r in records if r.status == "ok"]
        latencies = [r.latency_s for r in ok]
        summary: dict[str, Any] = {
            "base_url": c.base_url,
            "task": c.task,
            "model": c.model,
            "num_prompts": c.num_prompts,
            "max_concurrency": c.max_concurrency,
            "request_rate": "inf" if math.isinf(c.request_rate) else c.request_rate,
            "completed": len(ok),
            "rejected": sum(r.status == "rejected" for r in records),
            "failed": sum(r.status == "failed" for r in records),
            "duration_s": duration,
            "throughput_rps": len(ok) / duration if duration > 0 else None,
            "latency_ms": _stats_ms(latencies),
        }
        if c.slo_ms is not None:
            met = sum(r.latency_s * 1000 <= c.slo_ms for r in ok)
            summary["slo_ms"] = c.slo_ms
            summary["slo_attainment"] = met / len(records) if records else None
        if c.task in ("tts", "realtime"):
            ttfb = [r.ttfb_s for r in ok if r.ttfb_s is not None]
            rtf = [r.latency_s / r.audio_s for r in ok if r.audio_s]
            summary["ttfb_ms"] = _stats_ms(ttfb)
            summary["real_time_factor"] = {
                "mean": statistics.fmean(rtf) if rtf else None,
                "p50": percentile(rtf, 50),
                "p90": percentile(rtf, 90),
            }
            summary["audio_seconds"] = sum(r.audio_s or 0.0 for r in ok)
        errors = [r.error for r in records if r.error]
        if errors:
            summary["first_errors"] = errors[:5]
        summary["requests"] = [asdict(r) for r in records]
        return summary


def format_summary(summary: dict[str, Any]) -> str:
    """Human-readable lines of a summary."""

    def fmt(d: dict[str, Any] | None, unit: str = "ms") -> str:
        if not d:
            return "-"
        return "  ".join(f"{k} {v:.1f}{unit}" for k, v in d.items() if v is not None)

    lines = [
        f"task {summary['task']}  model {summary['model']}  prompts {summary['num_prompts']}  "
        f"concurrency {summary['max_concurrency']}  rate {summary['request_rate']}",
        f"completed {summary['completed']}  rejected (429) {summary['rejected']}  "
        f"failed {summary['failed']}  in {summary['duration_s']:.2f} s",
        f"throughput {summary['throughput_rps'] or 0:.3f} req/s",
        f"latency    {fmt(summary['latency_ms'])}",
    ]
    if "slo_attainment" in summary:
        lines.append(
            f"SLO {summary['slo_ms']:g} ms attained by "
            f"{100 * (summary['slo_attainment'] or 0):.1f}% of requests"
        )
    if "ttfb_ms" in summary:
        rtf = summary["real_time_factor"]
        lines.append(f"first audio {fmt(summary['ttfb_ms'])}")
        if rtf["mean"] is not None:
            lines.append(
                f"real-time factor mean {rtf['mean']:.3f}  p50 {rtf['p50']:.3f}  "
                f"p90 {rtf['p90']:.3f} (below 1 is faster than real time)"
            )
    for error in summary.get("first_errors", []):
        lines.append(f"error: {error}")
    return "\n".join(lines)


def write_json(summary: dict[str, Any], path: Path, command: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"command": command, **summary}, indent=2))


def plot(summary: dict[str, Any], path: Path) -> None:
    """Latency over time (by status) and the latency distribution, as one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = summary["requests"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"ok": "tab:blue", "rejected": "tab:orange", "failed": "tab:red"}
    for status, color in colors.items():
        pts = [(r["start_s"], r["latency_s"] * 1000) for r in records if r["status"] == status]
        if pts:
            ax1.scatter(*zip(*pts, strict=True), s=12, c=color, label=status)
    if summary.get("slo_ms"):
        ax1.axhline(summary["slo_ms"], color="gray", linestyle="--", label="SLO")
    ax1.set_xlabel("request start (s)")
    ax1.set_ylabel("latency (ms)")
    ax1.legend()
    ok = [r["latency_s"] * 1000 for r in records if r["status"] == "ok"]
    if ok:
        ax2.hist(ok, bins=min(30, max(5, len(ok) // 2)), color="tab:blue")
    ax2.set_xlabel("latency (ms)")
    ax2.set_ylabel("requests")
    fig.suptitle(
        f"omni bench serve: {summary['task']} {summary['model']} "
        f"(c={summary['max_concurrency']}, rate={summary['request_rate']}) "
        f"{summary['throughput_rps'] or 0:.2f} req/s"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
