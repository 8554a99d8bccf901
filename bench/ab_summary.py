"""Medians of an A/B run (``bench/ab_trees.sh``): the numbers each bench's JSON reports for omni,
side by side, and B's change against A, written to ``--out`` with the runs' commands.

Knows the JSON of ``wan_step.py`` (``results.<mode>.median_s``), ``qwen_step.py``
(``cases.<case>.<mode>.median_s``) and ``qwen3_tts_bench.py`` (``results[].levels[]`` first
audio and real-time factor per concurrency); a file of another shape is listed, not compared.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def _metrics(data: dict[str, Any]) -> dict[str, list[float]]:
    """Each metric's values in one result file (a level repeated in ``--concurrency`` gives
    several)."""
    out: dict[str, list[float]] = {}
    results = data.get("results")
    if isinstance(results, dict):  # wan_step.py
        for mode, row in results.items():
            if isinstance(row, dict) and "median_s" in row:
                out.setdefault(f"{mode}.median_s", []).append(row["median_s"])
    if isinstance(data.get("cases"), dict):  # qwen_step.py
        for case, modes in data["cases"].items():
            for mode, row in modes.items():
                if isinstance(row, dict) and "median_s" in row:
                    out.setdefault(f"{case}.{mode}.median_s", []).append(row["median_s"])
    if isinstance(results, list):  # qwen3_tts_bench.py: levels per graphs mode
        for result in results:
            modes = result.get("graphs")
            if not isinstance(modes, dict):
                modes = {"default": {"levels": result.get("levels", [])}}
            for mode, run in modes.items():
                for level in run.get("levels", []):
                    tag = f"{result.get('size', '')}.graphs-{mode}.c{level['concurrency']}"
                    out.setdefault(f"{tag}.ttfa_p50_s", []).append(level["ttfa_s"]["p50"])
                    out.setdefault(f"{tag}.rtf_p50", []).append(level["rtf"]["p50"])
    return out


def summarise(folder: Path) -> dict[str, Any]:
    runs: dict[tuple[str, str], list[dict[str, list[float]]]] = {}
    commands: dict[str, str] = {}
    for path in sorted(folder.glob("*.json")):
        script, side, _ = path.stem.rsplit("-", 2)
        data = json.loads(path.read_text())
        commands.setdefault(f"{script}-{side}", data.get("command", ""))
        runs.setdefault((script, side), []).append(_metrics(data))
    rows = []
    for script in sorted({s for s, _ in runs}):
        a, b = runs.get((script, "A"), []), runs.get((script, "B"), [])
        for key in sorted({k for r in a + b for k in r}):
            va = [v for r in a for v in r.get(key, [])]
            vb = [v for r in b for v in r.get(key, [])]
            if not va or not vb:
                continue
            ma, mb = statistics.median(va), statistics.median(vb)
            rows.append(
                {"bench": script, "metric": key, "A": ma, "B": mb, "A_runs": va, "B_runs": vb,
                 "change": (mb - ma) / ma if ma else None}
            )  # fmt: skip
    return {"rows": rows, "commands": commands}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    summary = summarise(args.folder)
    for row in summary["rows"]:
        change = "" if row["change"] is None else f"{100 * row['change']:+.2f}%"
        print(f"{row['bench']:18} {row['metric']:48} A {row['A']:.4f}  B {row['B']:.4f}  {change}")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
