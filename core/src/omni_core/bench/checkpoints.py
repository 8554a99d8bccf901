"""Checkpoint folders of workloads: built once under the work dir, reused while complete.

A folder is built under a ``.partial`` name and renamed when :meth:`Workload.build_checkpoint`
returns, with a marker file describing it; an interrupted build is never mistaken for a
complete one. Real-size folders take minutes and tens of GB to write, so reuse matters.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from omni_core.bench.measure import GIB
from omni_core.bench.workload import Workload

#: Written last into a complete folder: what was built, how long it took, its size.
MARKER = ".omni-bench.json"


def default_work_dir() -> Path:
    """``$OMNI_BENCH_DIR`` or ``~/.cache/omni/bench``: where checkpoint folders are kept."""
    return Path(os.environ.get("OMNI_BENCH_DIR") or Path.home() / ".cache" / "omni" / "bench")


def ensure_checkpoint(
    workload: Workload, work_dir: Path, *, rebuild: bool = False
) -> dict[str, Any]:
    """Build ``workload``'s folder under ``work_dir`` unless a complete one is there already."""
    folder = work_dir / workload.key
    marker = folder / MARKER
    if marker.exists() and not rebuild:
        return {**json.loads(marker.read_text()), "path": str(folder), "reused": True}
    partial = work_dir / f".{workload.key}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    t0 = time.perf_counter()
    try:
        workload.build_checkpoint(partial)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # tens of GB on a small disk
        raise
    info = {
        "workload": workload.name,
        "description": workload.description,
        "layers": workload.layers,
        "build_s": round(time.perf_counter() - t0, 2),
        "size_gib": round(_size(partial) / GIB, 3),
    }
    (partial / MARKER).write_text(json.dumps(info, indent=2) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    return {**info, "path": str(folder), "reused": False}


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


__all__ = ["MARKER", "default_work_dir", "ensure_checkpoint"]
