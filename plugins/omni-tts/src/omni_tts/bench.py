"""Time to first audio and real-time factor of the speech pipelines on this machine.

    python -m omni_tts.bench [--families piper,vits,...] [--runs 3] [--json out.json]

Each family is loaded once (the tiny random-weight checkpoints for the transformers families,
the installed default voice for ``piper``), warmed up with one request, then streamed ``runs``
times. Time to first audio (TTFA) is the wall time from the call to the first chunk; the
real-time factor (RTF) is total wall time / seconds of audio (below 1 = faster than real time).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

TEXT = (
    "The quick brown fox jumps over the lazy dog. Streaming speech lets a voice start before "
    "the text ends. This is the third sentence of the benchmark."
)
EXTRAS: dict[str, dict[str, Any]] = {
    "csm": {"max_new_tokens": 60},
    "speecht5": {"maxlenratio": 2.0},
}


def measure(family: str, runs: int, root: Path) -> dict[str, Any]:
    from omni_core import Omni
    from omni_core.speech import resolve_speech_model

    if family == "piper":
        ref, kwargs = resolve_speech_model("piper")
        model = ref
    else:
        from omni_tts.testing import build_tiny_tts

        model, kwargs = str(build_tiny_tts(root / family, family=family)), {}
    t0 = time.perf_counter()
    omni = Omni(model, **kwargs)
    load_s = time.perf_counter() - t0
    extras = EXTRAS.get(family, {})
    list(omni.stream(TEXT, seed=0, **extras))  # warm-up
    ttfa, rtf, audio_s, chunks = [], [], [], []
    for i in range(runs):
        start = time.perf_counter()
        first = None
        samples = 0
        n = 0
        rate = 0
        for chunk in omni.stream(TEXT, seed=i, **extras):
            if first is None:
                first = time.perf_counter() - start
            samples += len(chunk.samples)
            rate = chunk.sample_rate
            n += 1
        total = time.perf_counter() - start
        seconds = samples / rate
        ttfa.append(first or 0.0)
        rtf.append(total / seconds)
        audio_s.append(seconds)
        chunks.append(n)
    return {
        "family": family,
        "pipeline": omni.spec.name,
        "load_s": round(load_s, 3),
        "ttfa_s_median": round(statistics.median(ttfa), 4),
        "rtf_median": round(statistics.median(rtf), 4),
        "audio_s": round(statistics.median(audio_s), 3),
        "chunks": chunks[0],
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default="piper,vits,speecht5,fastspeech2,csm")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families.split(","):
            row = measure(family.strip(), args.runs, Path(tmp))
            rows.append(row)
            print(
                f"{row['family']:<12} TTFA {row['ttfa_s_median'] * 1000:7.1f} ms   "
                f"RTF {row['rtf_median']:.3f}   audio {row['audio_s']:.2f} s   "
                f"chunks {row['chunks']}   load {row['load_s']:.2f} s",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
