"""``omni bench serve --task chat``: spoken chat answers through a real server, level by level,
and the same answers in-process, in one JSON document.

:func:`run_chat_bench` takes a :class:`ChatBenchSettings`:

1. with ``checkpoint`` and ``in_process``: :class:`~omni_core.bench.chat_local.LocalChat`
   (``Omni(checkpoint, **options)`` on its own engine) runs every level first and is closed
   (its memory freed) before the server is used;
2. with ``start_server``: ``omni serve ID=checkpoint`` in a subprocess on 127.0.0.1 (a free
   port, a random API key, ``--max-batch`` the largest level, the same ``--option`` values,
   ``serve_args`` appended), healthy after its default warm-up; stopped at the end;
3. the HTTP levels (:class:`~omni_core.bench.chat_http.HttpChat`), after ``warmup`` unmeasured
   answers per mode at the measured length, then the server's peak device memory.

The result (``--output``): ``command``, ``settings``, ``versions``, ``device``, ``model``,
``rows`` (one per path, mode and level; keys in :mod:`omni_core.bench.chat_stats`),
``comparisons`` (:func:`~omni_core.bench.chat_stats.compare`), ``peak_device_memory_bytes``
(``http``, ``in_process``: the largest of their rows'), ``answers`` (every answer's record, by row).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import secrets
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from omni_core.bench.chat_stats import Level, compare

MODES = ("audio", "text")


@dataclass
class ChatBenchSettings:
    """What one run measures (``omni bench serve --task chat``'s flags)."""

    base_url: str = "http://127.0.0.1:8000"
    model: str | None = None
    api_key: str | None = None
    levels: tuple[int, ...] = (1, 2, 8, 32)
    text_levels: tuple[int, ...] = (1, 32)
    max_tokens: int = 24
    rounds: int = 3
    warmup: int = 1
    seed: int = 0
    voice: str | None = None
    audio_shape: str = "vllm"
    extra: dict[str, Any] = field(default_factory=dict)
    checkpoint: Path | None = None
    start_server: bool = False
    in_process: bool = True
    options: dict[str, Any] = field(default_factory=dict)
    serve_args: tuple[str, ...] = ()
    timeout_s: float = 3600.0
    start_timeout_s: float = 3600.0

    @property
    def max_batch(self) -> int:
        return max((*self.levels, *self.text_levels, 1))

    def plan(self) -> list[tuple[str, int]]:
        return [("audio", c) for c in self.levels] + [("text", c) for c in self.text_levels]


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("omni-core", "torch", "transformers", "openai"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def started_server(settings: ChatBenchSettings, log: Any = None) -> Any:
    """``omni serve`` on ``settings.checkpoint`` (module doc); yields (url, api key, model id)."""
    import httpx

    assert settings.checkpoint is not None
    model = settings.model or settings.checkpoint.name
    port, key = _free_port(), secrets.token_hex(16)
    state = Path(tempfile.mkdtemp(prefix="omni-chat-bench-"))
    argv = [
        sys.executable, "-c", "from omni_core.cli import main; main()", "serve",
        f"{model}={settings.checkpoint}", "--host", "127.0.0.1", "--port", str(port),
        "--api-key", key, "--state-dir", str(state / "state"),
        "--max-batch", str(settings.max_batch), "--max-queue", str(4 * settings.max_batch),
        "--log-level", "warning",
        *(a for k, v in settings.options.items() for a in ("--option", f"{k}={_text(v)}")),
        *settings.serve_args,
    ]  # fmt: skip
    logfile = state / "serve.log"
    with logfile.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline, t0 = time.monotonic() + settings.start_timeout_s, time.monotonic()
        while True:
            if proc.poll() is not None:
                tail = logfile.read_text(errors="replace").strip().splitlines()[-1:] or ["-"]
                raise RuntimeError(f"omni serve exited ({proc.returncode}): {tail[0]}")
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"omni serve was not healthy in time; see {logfile}")
            time.sleep(0.25)
        if log is not None:
            log(f"omni serve ready in {time.monotonic() - t0:.1f} s at {url} (log {logfile})")
        yield url, key, model
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


async def _http_levels(
    settings: ChatBenchSettings, url: str, key: str | None, model: str | None
) -> tuple[str, list[Level], int | None]:
    from omni_core.bench.chat_http import HttpChat, server_facts

    facts = await server_facts(url, key, model)
    model = facts["model"]
    if settings.levels and "audio" not in (facts["modalities"] or ["audio"]):
        raise RuntimeError(f"{model} answers {facts['modalities']}: no audio to measure")
    chat = HttpChat(url, key, model, settings)
    levels = []
    try:
        for mode in MODES:
            if any(m == mode for m, _ in settings.plan()):
                for _ in range(settings.warmup):
                    warm = await chat.answer(0, mode)
                    if warm.error:
                        raise RuntimeError(f"the warm-up answer failed: {warm.error}")
        for mode, concurrency in settings.plan():
            level = await chat.level(concurrency, mode, settings.rounds)
            level.peak_bytes = (await server_facts(url, key, model))["peak_bytes"]
            levels.append(level)
    finally:
        await chat.close()
    peaks = [lv.peak_bytes for lv in levels if lv.peak_bytes is not None]
    return model, levels, max(peaks) if peaks else None


def _local_levels(settings: ChatBenchSettings) -> tuple[list[Level], int | None, str]:
    from omni_core.bench.chat_local import LocalChat

    assert settings.checkpoint is not None
    local = LocalChat(settings.checkpoint, dict(settings.options), settings)
    try:
        for mode in MODES:
            if any(m == mode for m, _ in settings.plan()):
                for _ in range(settings.warmup):
                    local.level(1, mode, 1)
        levels = []
        for mode, concurrency in settings.plan():
            local.peak_bytes = None
            levels.append(local.level(concurrency, mode, settings.rounds))
            levels[-1].peak_bytes = local.peak_bytes
        peaks = [lv.peak_bytes for lv in levels if lv.peak_bytes is not None]
        return levels, max(peaks) if peaks else None, local.device()
    finally:
        local.close()


def _answers(level: Level) -> dict[str, Any]:
    records = [a.record() for a in level.answers]
    return {"path": level.path, "mode": level.mode, "concurrency": level.concurrency,
            "records": records}  # fmt: skip


def run_chat_bench(settings: ChatBenchSettings, log: Any = None) -> dict[str, Any]:
    """Measure (module doc); returns the result document."""
    local: list[Level] = []
    local_peak, device = None, None
    if settings.in_process and settings.checkpoint is not None:
        if log is not None:
            log(f"in-process: Omni({settings.checkpoint}) ...")
        local, local_peak, device = _local_levels(settings)
    if settings.start_server:
        with started_server(settings, log) as (url, key, model):
            model, http, peak = asyncio.run(_http_levels(settings, url, key, model))
    else:
        url = settings.base_url
        model, http, peak = asyncio.run(
            _http_levels(settings, url, settings.api_key, settings.model)
        )
    rows = [level.row(model) for level in [*http, *local]]
    public = {k: v for k, v in asdict(settings).items() if k not in ("api_key",)}
    public["checkpoint"] = None if settings.checkpoint is None else str(settings.checkpoint)
    return {
        "task": "chat",
        "base_url": url if not settings.start_server else "self-started",
        "model": model,
        "settings": public,
        "versions": _versions(),
        "device": device,
        "host": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "rows": rows,
        "comparisons": compare(rows),
        "peak_device_memory_bytes": {"http": peak, "in_process": local_peak},
        "answers": [_answers(level) for level in [*http, *local]],
    }


__all__ = ["ChatBenchSettings", "run_chat_bench", "started_server"]
