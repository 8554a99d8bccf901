"""Run ``omni bench pipeline`` as a plain script (the GPU machine may not have omni installed).

    python3 bench/pipeline_bench.py --workload qwen-image-1024 --out $OUT/qwen.json
    python3 bench/pipeline_bench.py --workload wan2.2-ti2v-5b-704x1280x121 --reps 1 \\
        --out $OUT/wan5b.json
    python3 bench/pipeline_bench.py --tiny --out /tmp/tiny.json              # CPU smoke test
    python3 bench/pipeline_bench.py --workload qwen-image-1024 --modes omni,omni-fp8 \\
        --out $OUT/qwen-fp8.json     # the fp8 mode (fp8 linears + fp8 attention), psnr_vs_omni_db
    python3 bench/pipeline_bench.py --combine a.json b.json --out bench/results/pipeline-h200.json

Every option is the command's (``omni bench pipeline --help``); the runner is
:mod:`omni_core.bench.runner` and the workloads are the plugins' (``--list``).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _combine(argv: list[str]) -> int:
    """Merge the rows of several result files into one JSON + plot.

    Speed-ups are recomputed per workload over the merged rows, so the reference modes and
    omni's may come from separate runs (``--modes diffusers,diffusers-compiled`` in one call,
    ``--modes omni`` in the next) on the same machine kind.
    """
    from omni_core.bench.plot import write_plot
    from omni_core.bench.report import add_speedups, load_rows

    out = Path(argv[argv.index("--out") + 1])
    sources = [Path(a) for a in argv[argv.index("--combine") + 1 :] if not a.startswith("--")]
    sources = [s for s in sources if s != out]
    runs, rows = [], []
    for src in sources:
        meta, more = load_rows(src)
        runs.append({"file": src.name, **meta})
        rows.extend(more)
    for workload in dict.fromkeys(r["workload"] for r in rows):
        add_speedups([r for r in rows if r["workload"] == workload])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"runs": runs, "rows": rows}, indent=2, default=str) + "\n")
    write_plot(rows, out.with_suffix(".png"))
    print(f"combined {len(rows)} rows from {len(sources)} files into {out}")
    return 0


def main() -> int:
    try:
        import omni_core  # noqa: F401
    except ImportError:  # a bare checkout: the sources, and the model plugins by hand
        plugins = ("omni-wan", "omni-qwen", "omni-attention-fp8")  # the last: omni-fp8's kernel
        for src in ("core/src", *(f"plugins/{name}/src" for name in plugins)):
            sys.path.insert(0, str(ROOT / src))
        from omni_core.contract.host import get_host

        for name in plugins:
            if name not in get_host().plugins:
                get_host().load_module(name, name.replace("-", "_") + ".plugin")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    argv = sys.argv[1:]
    if "--combine" in argv:
        return _combine(argv)
    os.environ.setdefault(
        "OMNI_BENCH_COMMAND", "python3 bench/pipeline_bench.py " + shlex.join(argv)
    )
    from omni_core.commands.bench import bench_pipeline

    bench_pipeline.main(args=argv, prog_name="pipeline_bench.py", standalone_mode=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
