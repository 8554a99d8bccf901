"""The in-process side of ``omni bench serve --task chat``: the same answers on ``Omni(folder)``
and an :class:`~omni_core.runtime.engine.Engine` built as ``omni serve`` builds it (its warm-up
too), without HTTP. Each answer is a :func:`~omni_core.chat.api.chat_request` with the fields
the server's chat route sets for the HTTP body (streamed, ``temperature`` 0, the answer's
seed, ``--extra`` as extras), submitted as a :class:`~omni_core.runtime.jobs.Job` whose chunk
callback stamps the text and audio deltas on the worker thread as they are made; the clock of
each answer starts just before its submit. The HTTP rows minus these rows are what the server
adds (parsing, the event loop, encoding, the socket).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from omni_core.bench.chat_stats import PROMPT, Answer, Level


def _serve_value(args: tuple[str, ...], flag: str) -> str | None:
    """The value of ``flag`` among ``omni serve`` arguments (``--flag=V`` or ``--flag V``)."""
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
    return None


class LocalChat:
    """``Omni(folder, **options)`` on an engine of its own (``close`` frees it)."""

    def __init__(self, folder: Path, options: dict[str, Any], settings: Any) -> None:
        from omni_core.api import Omni
        from omni_core.contract.requests import warmup_request
        from omni_core.runtime.engine import Engine

        self.settings = settings
        self.omni = Omni(folder, **options)
        self.pipeline = self.omni.pipeline
        self.engine = Engine(
            self.pipeline,
            name="in-process",
            max_batch=settings.max_batch,
            max_queue=1024,
            batch_seeded="--batch-seeded" in settings.serve_args,  # as the server runs
            admit_window_s=float(_serve_value(settings.serve_args, "--admit-window-ms") or 0) / 1e3,
        ).start()
        self.peak_bytes: int | None = None
        self.engine.run(warmup_request(self.pipeline), timeout=settings.timeout_s)

    def _request(self, index: int, mode: str) -> Any:
        from omni_core.chat.api import chat_request

        s = self.settings
        return chat_request(
            self.pipeline,
            PROMPT.format(index),
            extras=dict(s.extra),
            modalities=("text", "audio") if mode == "audio" else ("text",),
            voice=s.voice if mode == "audio" else None,
            max_tokens=s.max_tokens,
            temperature=0.0,
            seed=s.seed + index,
            stream=True,
        )

    def _round(self, concurrency: int, mode: str) -> list[Answer]:
        from omni_core.runtime.jobs import Job

        lock = threading.Lock()
        answers = [Answer(index=i, seed=self.settings.seed + i) for i in range(concurrency)]
        starts = [0.0] * concurrency
        jobs = []

        def sink(i: int) -> Any:
            def on_chunk(delta: Any) -> None:
                at = time.perf_counter() - starts[i]
                with lock:
                    answers[i].add_text(at, delta.text or "")
                    if delta.audio is not None:
                        chunk = delta.audio
                        answers[i].add_audio(at, len(chunk.samples), int(chunk.sample_rate))
                    if delta.finish_reason is not None:
                        answers[i].finish_reason = str(delta.finish_reason)
                    if delta.usage is not None:
                        answers[i].completion_tokens = delta.usage.completion_tokens

            return on_chunk

        requests = [self._request(i, mode) for i in range(concurrency)]
        for i, request in enumerate(requests):
            starts[i] = time.perf_counter()
            jobs.append(self.engine.submit(Job(request, on_chunk=sink(i))))
        for i, job in enumerate(jobs):
            try:
                result = job.future.result(self.settings.timeout_s)
                answers[i].end_s = time.perf_counter() - starts[i]
                if result.peak_memory_bytes is not None:
                    self.peak_bytes = max(self.peak_bytes or 0, result.peak_memory_bytes)
            except Exception as exc:  # noqa: BLE001 - a benchmark records failures and goes on
                answers[i].error = f"{type(exc).__name__}: {exc}"[:300]
        return answers

    def level(self, concurrency: int, mode: str, rounds: int) -> Level:
        level = Level("in_process", mode, concurrency)
        for _ in range(rounds):
            t0 = time.perf_counter()
            level.answers += self._round(concurrency, mode)
            level.wall_s += time.perf_counter() - t0
        return level

    def device(self) -> str:
        """The device it ran on, by name (``cuda:0 (NVIDIA H200)``)."""
        options = self.pipeline.options
        if options is None:
            return "unknown"
        index = options.device.index or 0
        names = options.platform.device_names() if options.platform is not None else []
        name = names[index] if index < len(names) else ""
        device = str(options.device)
        return f"{device} ({name})" if name and name != options.device.type else device

    def close(self) -> None:
        self.engine.stop(drain=False, timeout=30)
        self.omni.close()


__all__ = ["LocalChat"]
