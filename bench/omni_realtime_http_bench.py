"""Issue 28's GPU row: spoken turns over ``/v1/realtime`` with Qwen2.5-Omni at the real sizes.

    bash bench/omni_realtime_http.sh                                 # on the GPU machine
    python3 bench/omni_realtime_http_bench.py --tiny --concurrency 1,2 --prompts 2 \\
        --out /tmp/omni-realtime-session-tiny.json                   # CPU smoke run

The checkpoint is the one of issue 26's chat benchmark (``omni_chat_http_bench.build_checkpoint``:
random weights at the real sizes, official layout, speech capped at ``--speech-frames`` codes),
served by a real ``omni serve`` on 127.0.0.1 (``omni_core.bench.chat.started_server``, the chat
benchmark's own starter). Then, per level, ``omni bench serve --task realtime`` against it: each
session appends one second of a voiced clip in 100 ms pieces, commits, and asks for an answer of
``--max-tokens`` tokens; first audio is timed from the commit. The rows (``model``,
``concurrency``, ``path`` "realtime", ``first_audio_s`` / ``first_audio_p95_s``, ``rtf``,
``audio_s``) with the command, GPU and versions go to ``--out``; each level's full summary (every
session) goes beside it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
MODEL = "qwen2.5-omni-7b"


def _level(url: str, key: str, concurrency: int, prompts: int, tokens: int, out: Path) -> dict:
    def argv_for(url: str, key: str) -> list[str]:
        return [
            "bench", "serve", "--task", "realtime", "--base-url", url, "--api-key", key,
            "--model", MODEL, "--max-concurrency", str(concurrency),
            "--num-prompts", str(prompts * concurrency), "--warmup-requests", str(concurrency),
            "--extra", json.dumps({"max_output_tokens": tokens}),
        ]  # fmt: skip

    argv = [*argv_for(url, key), "--output", str(out)]
    cmd = [sys.executable, "-c", "from omni_core.cli import main; main()", *argv]
    subprocess.run(cmd, check=True)
    from omni_core.bench.serve import percentile

    summary = json.loads(out.read_text())
    ok = [r for r in summary.get("requests", []) if r.get("audio_s") and r.get("ttfb_s")]
    ttfb = [r["ttfb_s"] for r in ok]
    rtf = [r["latency_s"] / r["audio_s"] for r in ok]
    return {
        "model": MODEL,
        "concurrency": concurrency,
        "path": "realtime",
        "sessions": len(summary.get("requests", [])),
        "completed": summary.get("completed"),
        "failed": summary.get("failed"),
        "first_audio_s": percentile(ttfb, 50),
        "first_audio_p95_s": percentile(ttfb, 95),
        "rtf": percentile(rtf, 50),
        "audio_s": (sum(r["audio_s"] for r in ok) / len(ok)) if ok else None,
        "command": "omni " + " ".join(argv_for("URL", "KEY")),
        "summary_file": out.name,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=Path("/tmp/omni-chat-ckpt"))
    parser.add_argument("--tiny", action="store_true", help="the tiny checkpoint (CPU run)")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--prompts", type=int, default=3, help="sessions per level, per slot")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--speech-frames", type=int, default=100)
    parser.add_argument("--option", action="append", default=[], help="KEY=VALUE load option")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from omni_chat_http_bench import build_checkpoint

    from omni_core.bench.chat import ChatBenchSettings, started_server

    folder = args.checkpoint / (MODEL + ("-tiny" if args.tiny else ""))
    build_checkpoint(MODEL, folder, args.speech_frames, args.tiny)
    levels = tuple(int(c) for c in args.concurrency.split(","))
    pairs = [f"talker_max_frames={args.speech_frames}", *args.option]
    options = dict(o.split("=", 1) for o in pairs)
    settings = ChatBenchSettings(
        model=MODEL, checkpoint=folder, levels=levels, text_levels=(), options=options
    )
    rows: list[dict[str, Any]] = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with started_server(settings, log=print) as (url, key, _):
        for level in levels:
            out = args.out.with_name(f"{args.out.stem}-c{level}.json")
            rows.append(_level(url, key, level, args.prompts, args.max_tokens, out))
            print(json.dumps(rows[-1]), flush=True)
    from importlib import metadata

    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    versions = {n: metadata.version(n) for n in ("omni-core", "torch", "transformers", "openai")}
    report = {
        "issue": 28,
        "script": "bash bench/omni_realtime_http.sh " + " ".join(sys.argv[1:]),
        "gpu": gpu,
        "versions": versions,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tiny": args.tiny,
        "load_options": options,
        "rows": rows,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
