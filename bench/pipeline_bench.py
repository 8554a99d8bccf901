"""Run ``omni bench pipeline`` as a plain script (the GPU machine may not have omni installed).

    python3 bench/pipeline_bench.py --out $OUT/pipeline-h200.json              # all workloads
    python3 bench/pipeline_bench.py --workload qwen-image-1024 --out $OUT/q.json
    python3 bench/pipeline_bench.py --tiny --out /tmp/tiny.json                 # CPU smoke test
    python3 bench/pipeline_bench.py --combine a.json b.json --out bench/results/pipeline-h200.json

Everything else is :mod:`omni_core.commands.bench_pipeline`.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _combine(argv: list[str]) -> int:
    """Merge row files of several runs (one per workload) into one JSON + plot."""
    from omni_core.commands.bench_pipeline import write_plot

    out = Path(argv[argv.index("--out") + 1])
    sources = [Path(a) for a in argv[argv.index("--combine") + 1 :] if not a.startswith("--")]
    sources = [s for s in sources if s != out]
    rows = []
    for src in sources:
        rows.extend(json.loads(src.read_text()))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    write_plot(rows, out.with_suffix(".png"))
    print(f"combined {len(rows)} rows from {len(sources)} files into {out}")
    return 0


def main() -> int:
    try:
        import omni_core  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(ROOT / "core" / "src"))
    os.environ.setdefault("OMNI_DISABLE_PLUGIN_AUTOLOAD", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    argv = sys.argv[1:]
    if "--combine" in argv:
        return _combine(argv)
    os.environ.setdefault(
        "OMNI_BENCH_COMMAND", "python3 bench/pipeline_bench.py " + shlex.join(argv)
    )
    from omni_core.commands.bench_pipeline import pipeline

    pipeline.main(args=argv, prog_name="pipeline_bench.py", standalone_mode=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
