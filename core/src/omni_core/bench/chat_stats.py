"""The records and figures of ``omni bench serve --task chat``: one :class:`Answer` per streamed
answer (HTTP or in-process, the same fields), summarised per level into one flat row.

Every time is in seconds from the answer's own start (the client's request for HTTP, the
engine submit in-process):

- ``first_token_s``: the first non-empty text piece;
- ``first_audio_s``: the first non-empty audio piece;
- ``rtf``: the time of the last audio piece over the seconds of audio received (below 1: made
  faster than it plays);
- ``text_tokens_per_s``: the answer's completion tokens over the time of its last text piece
  (prefill included, as a client sees it); ``text_tokens_per_s_total``: every answer's tokens
  of the level over the level's wall time.

Medians are the row's plain keys; ``_p90`` keys are the 90th percentiles (linear).
``peak_device_memory_bytes``: the peak over the level (the engine resets its peak when it goes
from idle to busy: a level starts idle); None where the platform does not tell.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from omni_core.bench.serve import percentile

#: The user turn of answer ``i`` (the same length for every ``i``: the same prefill).
PROMPT = "Tell me about the sound of the sea in the morning, number {:03d}."


@dataclass
class Answer:
    """One answer of a level, as measured."""

    index: int
    seed: int
    first_token_s: float | None = None
    last_text_s: float | None = None
    first_audio_s: float | None = None
    last_audio_s: float | None = None
    end_s: float | None = None
    audio_samples: int = 0
    sample_rate: int | None = None
    audio_pieces: int = 0
    completion_tokens: int | None = None
    finish_reason: str | None = None
    text: str = ""
    error: str | None = None

    @property
    def audio_s(self) -> float:
        return self.audio_samples / self.sample_rate if self.sample_rate else 0.0

    def add_audio(self, at: float, samples: int, rate: int) -> None:
        if samples <= 0:
            return
        if self.sample_rate is not None and rate != self.sample_rate:
            raise RuntimeError(f"the sample rate changed mid-answer: {self.sample_rate} -> {rate}")
        self.sample_rate = rate
        self.audio_samples += samples
        self.audio_pieces += 1
        if self.first_audio_s is None:
            self.first_audio_s = at
        self.last_audio_s = at

    def add_text(self, at: float, text: str) -> None:
        if not text:
            return
        self.text += text
        if self.first_token_s is None:
            self.first_token_s = at
        self.last_text_s = at

    def record(self) -> dict[str, Any]:
        out = {k: v for k, v in vars(self).items() if k != "text"}
        out["audio_s"] = self.audio_s
        return out


@dataclass
class Level:
    """The answers of one (path, mode, concurrency) and the wall time of its rounds."""

    path: str
    mode: str
    concurrency: int
    answers: list[Answer] = field(default_factory=list)
    wall_s: float = 0.0
    #: Peak device memory over the level (the server's gauge, or the engine's results).
    peak_bytes: int | None = None

    def row(self, model: str | None) -> dict[str, Any]:
        ok = [a for a in self.answers if a.error is None]
        row: dict[str, Any] = {
            "model": model,
            "path": self.path,
            "mode": self.mode,
            "concurrency": self.concurrency,
            "answers": len(self.answers),
            "failed": len(self.answers) - len(ok),
            "wall_s": self.wall_s,
            "peak_device_memory_bytes": self.peak_bytes,
        }
        tokens = [a.completion_tokens for a in ok if a.completion_tokens is not None]
        series: dict[str, list[float]] = {
            "first_token_s": [a.first_token_s for a in ok if a.first_token_s is not None],
            "text_tokens_per_s": [
                a.completion_tokens / a.last_text_s
                for a in ok
                if a.completion_tokens and a.last_text_s
            ],
            "completion_tokens": [float(t) for t in tokens],
            "latency_s": [a.end_s for a in ok if a.end_s is not None],
        }
        if self.mode == "audio":
            series["first_audio_s"] = [a.first_audio_s for a in ok if a.first_audio_s is not None]
            series["rtf"] = [a.last_audio_s / a.audio_s for a in ok if a.last_audio_s and a.audio_s]
            series["audio_s"] = [a.audio_s for a in ok]
        for key, values in series.items():
            stem = key[:-2] if key.endswith("_s") else key
            unit = "_s" if key.endswith("_s") else ""
            row[key] = statistics.median(values) if values else None
            row[f"{stem}_p90{unit}"] = percentile(values, 90)
        row["text_tokens_per_s_total"] = sum(tokens) / self.wall_s if self.wall_s > 0 else None
        if self.mode == "audio":
            row["audio_s_total"] = sum(a.audio_s for a in ok)
        errors = [a.error for a in self.answers if a.error]
        if errors:
            row["errors"] = errors[:5]
        return row


def compare(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the rows say together: HTTP minus in-process first audio per level (medians), and
    first audio at 2 answers over 1 on each path."""
    by = {(r["path"], r["mode"], r["concurrency"]): r for r in rows}
    out: dict[str, Any] = {"http_minus_in_process_first_audio_s": {}, "first_audio_2_over_1": {}}
    for (path, mode, level), row in by.items():
        if mode != "audio":
            continue
        local = by.get(("in_process", "audio", level))
        if path == "http" and local and row["first_audio_s"] and local["first_audio_s"]:
            diff = row["first_audio_s"] - local["first_audio_s"]
            out["http_minus_in_process_first_audio_s"][str(level)] = diff
        one, two = by.get((path, "audio", 1)), by.get((path, "audio", 2))
        if level == 1 and one and two and one["first_audio_s"] and two["first_audio_s"]:
            out["first_audio_2_over_1"][path] = two["first_audio_s"] / one["first_audio_s"]
    return out


def format_rows(rows: list[dict[str, Any]]) -> str:
    """One line per row: the medians a reader compares."""

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1e3:.0f} ms"

    lines = []
    for r in rows:
        parts = [
            f"{r['path']:<10} {r['mode']:<5} c={r['concurrency']:<3}",
            f"first token {ms(r['first_token_s'])}",
        ]
        if r["mode"] == "audio":
            rtf = "-" if r["rtf"] is None else f"{r['rtf']:.3f}"
            parts += [f"first audio {ms(r['first_audio_s'])}", f"rtf {rtf}"]
            parts.append(f"audio {r['audio_s'] or 0:.2f} s")
        per = r["text_tokens_per_s"]
        parts.append(f"{per or 0:.1f} tok/s/answer, {r['text_tokens_per_s_total'] or 0:.1f} in all")
        if r["failed"]:
            parts.append(f"FAILED {r['failed']}/{r['answers']}")
        lines.append("  ".join(parts))
    return "\n".join(lines)


__all__ = ["PROMPT", "Answer", "Level", "compare", "format_rows"]
