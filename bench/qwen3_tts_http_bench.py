"""Speech models through a real ``omni serve``: first audio and real-time factor per concurrency
(Qwen3-TTS, issue 27; VibeVoice, issue 30). Long because issue 27's "done when" is one run: the
checkpoints, the server, the HTTP and WebSocket clients, the in-process reference and the
server-side profile. The models (checkpoints, voices, frame fields) are
``bench/speech_http_models.py``.

    bash bench/qwen3_tts_http.sh                        # on the GPU machine (installs wheels)
    bash bench/vibevoice_http.sh                        # VibeVoice-1.5B, the same
    python3 bench/qwen3_tts_http_bench.py --tiny --concurrency 1,2 --frames 6 --rounds 2 \\
        --out /tmp/tiny-http.json                       # CPU smoke run
    python3 bench/qwen3_tts_http_bench.py --tiny --models vibevoice-1.5b --concurrency 1,2 \\
        --frames 6 --rounds 1 --out /tmp/tiny-vibevoice.json

Per model (``qwen3-tts-1.7b-customvoice``, ``qwen3-tts-0.6b-customvoice``,
``qwen3-tts-1.7b-base``, ``vibevoice-1.5b``, ``vibevoice-7b``) a checkpoint is written in the
official layout with random weights at the real sizes (``bench/qwen3_tts_bench.py``'s sizes;
Base adds the ECAPA speaker encoder; ``omni_vibevoice.bench.build_random_vibevoice``), or the
tiny one (``--tiny``), or reused from ``--checkpoint DIR``; then:

1. in-process: ``Omni(path)`` on an :class:`~omni_core.runtime.engine.Engine` configured as the
   server configures it (same warm-up), N streamed requests at once, submit -> first non-empty
   chunk;
2. ``omni serve`` as a subprocess on 127.0.0.1 (its default warm-up), healthy, a voice uploaded
   through ``POST /v1/audio/voices`` for Base; N concurrent streamed PCM requests with the
   official ``openai`` client (``AsyncOpenAI``, ``with_streaming_response``, ``stream_format:
   audio``), request start -> first non-empty bytes, RTF = wall / seconds of the bytes received;
   ``--path websocket`` drives ``/v1/audio/speech/stream`` (one sentence per session) the same.

Each request makes exactly ``--frames`` frames (random weights never say when to stop: Qwen3-TTS
holds its end token back with ``min_new_tokens``, the random VibeVoice speaks at every step).
``--profile-http 8`` adds a pass at those levels with the server's timings log
(``--timings-log``): where the HTTP path's first audio goes.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from qwen3_tts_bench import TEXT
from speech_http_models import (
    MODELS,
    REFERENCE_TEXT,
    UPLOADED,
    checkpoint_for,
    reference_wav,
    voice_of,
)

ROOT = Path(__file__).resolve().parents[1]
#: Issue 27's targets: concurrency -> (first audio median s, rtf median).
TARGETS = {1: (0.025, 0.10), 8: (0.050, 0.18), 32: (0.150, 0.35)}


# -- statistics -------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary(firsts: list[float], rtfs: list[float], audio_per_wall: list[float]) -> dict:
    return {
        "first_audio_s": statistics.median(firsts),
        "first_audio_p95_s": _pct(firsts, 0.95),
        "first_audio_max_s": max(firsts),
        "rtf": statistics.median(rtfs),
        "rtf_p95": _pct(rtfs, 0.95),
        "audio_s_per_wall_s": statistics.median(audio_per_wall),
        "requests": len(firsts),
    }


def _text(i: int) -> str:
    return f"{TEXT} ({i:03d})"


# -- in-process -------------------------------------------------------------------------------


def in_process(path: Path, model: str, args: argparse.Namespace, device: str) -> dict[str, Any]:
    """The engine alone: ``Omni(path)`` on an Engine as ``omni serve`` builds it."""
    import numpy as np

    from omni_core import Omni
    from omni_core.contract.requests import warmup_request
    from omni_core.contract.types import ReferenceVoice
    from omni_core.runtime.engine import Engine
    from omni_core.runtime.jobs import Job
    from omni_core.speech.voices import decode_reference

    omni = Omni(path, device=device, **args.option)  # what `omni serve --option` loads with
    pipeline = omni.pipeline
    engine = Engine(pipeline, name=model, max_batch=args.max_batch, max_queue=args.max_queue)
    engine.start()
    fields: dict[str, Any] = MODELS[model].frame_fields(args.frames)
    if MODELS[model].voice is None:  # a model that clones: the voice the server uploads
        audio, rate = decode_reference(reference_wav())
        voice = ReferenceVoice(audio=audio, sample_rate=rate, transcript=REFERENCE_TEXT)
        prepared = pipeline.prepare_voice(voice)  # as an uploaded voice: prepared once
        fields["reference"] = ReferenceVoice(transcript=REFERENCE_TEXT, prepared=prepared)
    else:
        fields["voice"] = voice_of(model)
    try:
        if not args.no_warmup:
            engine.run(warmup_request(pipeline), timeout=3600)

        def one_round(n: int) -> tuple[list[float], list[float], float]:
            firsts: dict[str, float] = {}
            lock = threading.Lock()

            def sink(job_id: str) -> Any:
                def on_chunk(chunk: Any) -> None:
                    if len(chunk.samples):
                        now = time.perf_counter()
                        with lock:
                            firsts.setdefault(job_id, now)

                return on_chunk

            jobs = []
            started = time.perf_counter()
            for i in range(n):
                request = omni.request(_text(i), stream=True, **fields)
                job = Job(request, on_chunk=sink(request.request_id))
                jobs.append((time.perf_counter(), engine.submit(job)))
            done = [(t0, job, job.future.result(3600), time.perf_counter()) for t0, job in jobs]
            wall = time.perf_counter() - started
            seconds = [len(np.asarray(r.audio)) / r.sample_rate for _, _, r, _ in done]
            ttfa = [firsts[job.id] - t0 for t0, job, _, _ in done]
            rtf = [(end - t0) / s for (t0, _, _, end), s in zip(done, seconds, strict=True)]
            return ttfa, rtf, sum(seconds) / wall

        levels = {}
        for n in args.concurrency:
            for _ in range(args.warmup_rounds):
                one_round(n)
            firsts, rtfs, rates = [], [], []
            for _ in range(args.rounds):
                f, r, a = one_round(n)
                firsts += f
                rtfs += r
                rates.append(a)
            levels[n] = summary(firsts, rtfs, rates)
            # the decode path that ran (a pipeline with a decode_report: CUDA graphs or eager)
            report = getattr(pipeline, "decode_report", None)
            levels[n]["decode_path"] = report()["path"] if report is not None else None
            print(
                f"{model} in-process c={n}: first audio "
                f"{levels[n]['first_audio_s'] * 1e3:.1f} ms, rtf {levels[n]['rtf']:.3f}",
                flush=True,
            )
    finally:
        engine.stop()
        omni.close()
    return levels


# -- the server -------------------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """``omni serve MODEL=PATH`` in a subprocess, healthy after its default warm-up."""

    def __init__(self, model: str, path: Path, args: argparse.Namespace, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = "bench-key"
        self.timings = workdir / f"{model}-timings.jsonl" if args.profile_http else None
        self.argv = [
            "serve",
            f"{model}={path}",
            "--port",
            str(self.port),
            "--api-key",
            self.api_key,
            "--state-dir",
            str(workdir / f"{model}-state"),
            "--max-batch",
            str(args.max_batch),
            "--max-queue",
            str(args.max_queue),
            "--log-level",
            "warning",
            *(["--no-warmup"] if args.no_warmup else []),
            *(["--timings-log", str(self.timings)] if self.timings else []),
            *(a for key, value in args.option.items() for a in ("--option", f"{key}={value}")),
            *args.serve_arg,
        ]
        self.log = workdir / f"{model}-serve.log"
        cmd = [sys.executable, "-c", "from omni_core.cli import main; main()", *self.argv]
        self.proc = subprocess.Popen(cmd, stdout=self.log.open("ab"), stderr=subprocess.STDOUT)
        t0 = time.monotonic()
        self.ready_s = self._wait(t0 + args.start_timeout) - t0

    def _wait(self, deadline: float) -> float:
        import httpx

        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"omni serve exited:\n{self.log.read_text()[-4000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return time.monotonic()
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"omni serve not healthy in time:\n{self.log.read_text()[-4000:]}")

    def upload_voice(self) -> None:
        import httpx

        made = httpx.post(
            f"{self.url}/v1/audio/voices",
            headers={"Authorization": f"Bearer {self.api_key}"},
            files={"audio": ("voice.wav", reference_wav(), "audio/wav")},
            data={"name": UPLOADED, "consent": "bench", "transcript": REFERENCE_TEXT},
            timeout=600,
        )
        if made.status_code != 201:
            raise RuntimeError(f"voice upload failed: {made.status_code} {made.text}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def speech_fields(model: str, voice: str, frames: int) -> dict[str, Any]:
    return {
        "model": model,
        "voice": voice,
        "response_format": "pcm",
        "stream_format": "audio",
        "extra_body": MODELS[model].frame_fields(frames),
    }


async def http_request(client: Any, fields: dict[str, Any], text: str) -> dict[str, Any]:
    """One streamed PCM request: request start -> first non-empty bytes; seconds received."""
    rid = uuid.uuid4().hex
    t0 = time.perf_counter()
    first = None
    size = 0
    async with client.audio.speech.with_streaming_response.create(
        input=text, extra_headers={"x-request-id": rid}, **fields
    ) as response:
        rate = int(response.headers.get("x-omni-sample-rate", "24000"))
        async for part in response.iter_bytes():
            if part:
                if first is None:
                    first = time.perf_counter()
                size += len(part)
    end = time.perf_counter()
    seconds = size / 2 / rate
    return {"id": rid, "t0": t0, "first": first - t0, "end": end - t0, "seconds": seconds}


async def ws_request(url: str, key: str, fields: dict[str, Any], text: str) -> dict[str, Any]:
    """One WebSocket session of one sentence: session start -> first binary audio frame."""
    import websockets

    t0 = time.perf_counter()
    first = None
    size = 0
    rate = 24000
    headers = {"Authorization": f"Bearer {key}"}
    async with websockets.connect(url, additional_headers=headers, max_size=2**24) as ws:
        config = {
            "type": "session.config",
            "model": fields["model"],
            "voice": fields["voice"],
            "response_format": "pcm",
            **fields["extra_body"],
        }
        await ws.send(json.dumps(config))
        await ws.send(json.dumps({"type": "input.text", "text": text}))
        await ws.send(json.dumps({"type": "input.done"}))
        async for message in ws:
            if isinstance(message, bytes):
                if message and first is None:
                    first = time.perf_counter()
                size += len(message)
                continue
            event = json.loads(message)
            if event["type"] == "audio.start":
                rate = int(event.get("sample_rate") or rate)
            elif event["type"] == "error":
                raise RuntimeError(f"websocket error: {event}")
            elif event["type"] == "session.done":
                break
    end = time.perf_counter()
    return {"id": None, "t0": t0, "first": first - t0, "end": end - t0, "seconds": size / 2 / rate}


async def drive(server: Server, model: str, path: str, n: int, frames: int) -> list[dict]:
    """N requests at once on one path; each request's figures."""
    fields = speech_fields(model, voice_of(model), frames)
    if path == "websocket":
        url = server.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
        jobs = [ws_request(url, server.api_key, fields, _text(i)) for i in range(n)]
        return list(await asyncio.gather(*jobs))
    import httpx
    import openai

    limits = httpx.Limits(max_connections=n + 8, max_keepalive_connections=n + 8)
    async with (
        httpx.AsyncClient(limits=limits, timeout=3600) as transport,
        openai.AsyncOpenAI(
            base_url=f"{server.url}/v1",
            api_key=server.api_key,
            max_retries=0,
            http_client=transport,
        ) as client,
    ):
        jobs = [http_request(client, fields, _text(i)) for i in range(n)]
        return list(await asyncio.gather(*jobs))


def served_level(server: Server, model: str, path: str, n: int, args: argparse.Namespace) -> dict:
    for _ in range(args.warmup_rounds):
        asyncio.run(drive(server, model, path, n, args.frames))
    firsts, rtfs, rates = [], [], []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        done = asyncio.run(drive(server, model, path, n, args.frames))
        wall = time.perf_counter() - t0
        firsts += [d["first"] for d in done]
        rtfs += [d["end"] / d["seconds"] for d in done]
        rates.append(sum(d["seconds"] for d in done) / wall)
    return summary(firsts, rtfs, rates)


# -- the server-side profile ------------------------------------------------------------------

#: The server's timings log marks (monotonic seconds), in the order a request passes them.
MARKS = ("accepted", "body_read", "submitted", "started", "chunk_made", "chunk_on_loop")


def profile_level(server: Server, model: str, n: int, args: argparse.Namespace) -> dict:
    """One round of N requests with the server's timings log: per mark, the median seconds
    from the client's request start (the same monotonic clock: one host)."""
    assert server.timings is not None
    before = server.timings.read_text().count("\n") if server.timings.exists() else 0
    done = asyncio.run(drive(server, model, "http", n, args.frames))
    time.sleep(0.5)  # the last lines are written when each response ends
    lines = server.timings.read_text().splitlines()[before:]
    marks = {row["request_id"]: row for row in map(json.loads, lines)}
    offsets: dict[str, list[float]] = {m: [] for m in (*MARKS, "first_bytes", "first_received")}
    for d in done:
        row = marks.get(d["id"])
        if row is None:
            continue
        t0 = d["t0"]  # perf_counter is CLOCK_MONOTONIC on Linux, as the server's monotonic
        for mark in (*MARKS, "first_bytes"):
            if row.get(mark) is not None:
                offsets[mark].append(row[mark] - t0)
        offsets["first_received"].append(d["first"])
    medians = {m: statistics.median(v) for m, v in offsets.items() if v}
    steps, last = {}, 0.0
    for mark, value in medians.items():
        steps[f"to_{mark}_ms"] = (value - last) * 1e3
        last = value
    print(
        f"{model} profile http c={n}: "
        + ", ".join(f"{k[3:-3]} +{v:.1f}" for k, v in steps.items())
        + " ms",
        flush=True,
    )
    return {"concurrency": n, "median_s_from_request_start": medians, "median_step_ms": steps}


# -- one model --------------------------------------------------------------------------------


def bench_model(model: str, args: argparse.Namespace, root: Path, workdir: Path) -> list[dict]:
    import torch

    cuda = torch.cuda.is_available() and not args.cpu
    device = "cuda" if cuda else "cpu"
    t0 = time.perf_counter()
    path = checkpoint_for(model, args.tiny, root, device)
    print(f"{model}: checkpoint at {path} ({time.perf_counter() - t0:.1f} s)", flush=True)
    inside = {} if args.no_in_process else in_process(path, model, args, device)
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    server = Server(model, path, args, workdir)
    print(f"{model}: omni serve healthy after {server.ready_s:.1f} s", flush=True)
    rows = []
    try:
        if MODELS[model].voice is None:
            server.upload_voice()
        # the first request after start-up, alone: the issue wants it as fast as the rest
        first = asyncio.run(drive(server, model, "http", 1, args.frames))[0]
        for path_name in args.path:
            for n in args.concurrency:
                level = served_level(server, model, path_name, n, args)
                ref = inside.get(n)
                row = {
                    "model": model,
                    "concurrency": n,
                    "path": path_name,
                    "load_options": args.option,
                    "first_audio_s": level["first_audio_s"],
                    "first_audio_p95_s": level["first_audio_p95_s"],
                    "rtf": level["rtf"],
                    "audio_s_per_wall_s": level["audio_s_per_wall_s"],
                    "in_process_first_audio_s": ref["first_audio_s"] if ref else None,
                    "in_process_first_audio_p95_s": ref["first_audio_p95_s"] if ref else None,
                    "in_process_rtf": ref["rtf"] if ref else None,
                    "in_process_audio_s_per_wall_s": ref["audio_s_per_wall_s"] if ref else None,
                    "in_process_decode_path": ref["decode_path"] if ref else None,
                    "overhead_first_audio_s": (
                        level["first_audio_s"] - ref["first_audio_s"] if ref else None
                    ),
                    "first_request_after_start_s": first["first"],
                    "frames": args.frames,
                    "rounds": args.rounds,
                    "requests": level["requests"],
                    "first_audio_max_s": level["first_audio_max_s"],
                    "rtf_p95": level["rtf_p95"],
                    "server_ready_s": server.ready_s,
                }
                target = TARGETS.get(n) if MODELS[model].plugin == "omni-qwen" else None
                if target is not None:
                    row["target"] = {"first_audio_s": target[0], "rtf": target[1]}
                    row["target_met"] = (
                        level["first_audio_s"] <= target[0] and level["rtf"] <= target[1]
                    )
                rows.append(row)
                extra = (
                    f" (in-process {ref['first_audio_s'] * 1e3:.1f} ms, rtf {ref['rtf']:.3f})"
                    if ref
                    else ""
                )
                print(
                    f"{model} {path_name} c={n}: first audio {level['first_audio_s'] * 1e3:.1f} "
                    f"ms (p95 {level['first_audio_p95_s'] * 1e3:.1f}), rtf {level['rtf']:.3f}, "
                    f"{level['audio_s_per_wall_s']:.1f} audio s/s{extra}",
                    flush=True,
                )
        if args.profile_http:
            profiles = [profile_level(server, model, n, args) for n in args.profile_http]
            for row in rows:
                row["http_profile"] = profiles
    finally:
        server.stop()
    return rows


def versions() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, Any] = {"python": platform.python_version()}
    for name in (
        "omni-core", "omni-qwen", "omni-vibevoice", "omni-dia", "torch", "diffusers",
        "transformers", "fastapi", "uvicorn", "starlette", "openai", "httpx", "websockets",
    ):  # fmt: skip
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def gpu_name(cpu: bool) -> str:
    import torch

    if torch.cuda.is_available() and not cpu:
        return torch.cuda.get_device_name(0)
    return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def _ints(text: str) -> list[int]:
    return [int(c) for c in text.split(",") if c.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated served ids")
    parser.add_argument("--tiny", action="store_true", help="tiny checkpoints (CPU smoke run)")
    parser.add_argument("--checkpoint", type=Path, help="folder of built checkpoints (reused)")
    parser.add_argument("--concurrency", default="1,8,32,64")
    parser.add_argument(
        "--frames",
        type=int,
        default=100,
        help="frames per request (Qwen3-TTS: 80 ms each; VibeVoice: 133 ms)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per level")
    parser.add_argument("--warmup-rounds", type=int, default=1, help="untimed rounds per level")
    parser.add_argument("--path", default="http", help="http, websocket (comma-separated)")
    parser.add_argument("--max-batch", type=int, help="omni serve --max-batch (default: top level)")
    parser.add_argument("--max-queue", type=int, help="omni serve --max-queue (default 4x batch)")
    parser.add_argument("--no-warmup", action="store_true", help="omni serve --no-warmup")
    parser.add_argument("--no-in-process", action="store_true", help="skip the engine alone")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        help="a load option KEY=VALUE for the served model and the in-process engine alike "
        "(e.g. codec_graphs=on)",
    )
    parser.add_argument(
        "--serve-arg", action="append", default=[], help="one more omni serve argument"
    )
    parser.add_argument("--profile-http", default="", help="levels of a timings-log pass, e.g. 8")
    parser.add_argument("--start-timeout", type=float, default=1800.0)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--combine", type=Path, nargs="+", help="merge these reports' rows")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.combine:
        reports = [json.loads(p.read_text()) for p in args.combine]
        merged = {**reports[0], "rows": [r for rep in reports for r in rep["rows"]]}
        merged["command"] = [rep["command"] for rep in reports]
        args.out.write_text(json.dumps(merged, indent=2) + "\n")
        return 0
    if bad := [o for o in args.option if "=" not in o]:
        parser.error(f"--option takes KEY=VALUE: {', '.join(bad)}")
    args.option = dict(o.split("=", 1) for o in args.option)
    args.concurrency = _ints(args.concurrency)
    args.profile_http = _ints(args.profile_http)
    args.path = [p.strip() for p in args.path.split(",") if p.strip()]
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS] + [
        p for p in args.path if p not in ("http", "websocket")
    ]
    if unknown:
        parser.error(f"unknown model or path: {', '.join(unknown)}")
    args.max_batch = args.max_batch or max(args.concurrency)
    args.max_queue = args.max_queue or 4 * args.max_batch
    if args.cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the served model too
    report: dict[str, Any] = {
        "command": " ".join(["python3", *sys.argv]),
        "gpu": gpu_name(args.cpu),
        "versions": versions(),
        "what": "streamed PCM through omni serve (official openai client, AsyncOpenAI); "
        "first audio = request start -> first non-empty bytes; rtf = wall / audio seconds "
        "received; in_process_* = the same engine without HTTP, same run",
        "targets": {str(k): {"first_audio_s": v[0], "rtf": v[1]} for k, v in TARGETS.items()},
        "load_options": args.option,
        "rows": [],
    }
    with tempfile.TemporaryDirectory(prefix="qwen3-tts-http-") as tmp:
        root = args.checkpoint or Path(tmp) / "checkpoints"
        for model in models:
            report["rows"] += bench_model(model, args, root, Path(tmp))
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
