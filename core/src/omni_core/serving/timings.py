"""Server-side timestamps of streamed requests (``omni serve --timings-log PATH``): where a
streamed answer's first audio goes between the socket and the engine.

One JSON line per streamed speech request: the request id and ``time.monotonic()`` seconds at
each mark it passed (``accepted``, ``body_read``, ``submitted``, ``started`` on the engine,
``chunk_made`` on the engine thread, ``chunk_on_loop`` back on the event loop,
``first_bytes`` handed to the socket, ``done``). The clock is the host's monotonic one, so a
client on the same host (``bench/qwen3_tts_http_bench.py --profile-http``) lines them up with
its own. Off by default: profiling, not metrics (those are ``/metrics``).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path


class RequestMarks:
    """The marks of one request; ``mark`` keeps the first time of each name."""

    __slots__ = ("marks", "request_id")

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.marks: dict[str, float] = {"accepted": time.monotonic()}

    def mark(self, name: str, at: float | None = None) -> None:
        self.marks.setdefault(name, time.monotonic() if at is None else at)


class TimingsLog:
    """Appends each finished request's marks to ``path`` (thread-safe, line-buffered)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, marks: RequestMarks) -> None:
        line = json.dumps({"request_id": marks.request_id, **marks.marks}) + "\n"
        with self._lock, self.path.open("a", encoding="utf-8") as handle:
            handle.write(line)
