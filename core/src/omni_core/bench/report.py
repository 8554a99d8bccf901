"""The result file: the run's metadata (command, device, versions) and its rows, as JSON.

The file is rewritten after every row, so a run cut short (a timeout, an OOM that kills the
process) still leaves the rows measured so far. Its shape::

    {"command": "omni bench pipeline ...", "device": "NVIDIA H200", "platform": "cuda",
     "versions": {"torch": ..., "diffusers": ..., "omni-core": ...}, "started": ..., "rows": [...]}
"""

from __future__ import annotations

import datetime
import json
import platform as _host
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

#: Third-party distributions whose versions every result file records.
LIBRARIES = ("torch", "diffusers", "transformers", "accelerate", "torchao", "safetensors")


def versions() -> dict[str, str | None]:
    """Python, the libraries above and every installed omni distribution."""
    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name == "omni" or name.startswith("omni-"):
            out[name] = dist.version
    return dict(sorted(out.items(), key=lambda kv: (kv[0] != "python", kv[0])))


def device_name(platform: Any, device: Any) -> str:
    """A readable name of ``device`` ("NVIDIA H200", "cpu (x86_64, 16 threads)")."""
    kind = str(device).split(":")[0]
    if kind == "cpu":
        import os

        return f"cpu ({_host.processor() or _host.machine()}, {os.cpu_count()} threads)"
    index = int(str(device).split(":")[1]) if ":" in str(device) else 0
    names = platform.device_names()
    return names[index] if index < len(names) else str(device)


class ResultFile:
    """The JSON file of one run; :meth:`add` appends a row and rewrites the file."""

    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        self.path = path
        self.meta = {
            **meta,
            "versions": versions(),
            "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }
        self.rows: list[dict[str, Any]] = []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.write()

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        self.write()

    def write(self) -> None:
        data = {**self.meta, "rows": self.rows}
        self.path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def load_rows(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(metadata, rows) of a result file (also of the older plain-list files)."""
    data = json.loads(path.read_text())
    if isinstance(data, list):
        return {}, data
    rows = data.pop("rows", [])
    return data, rows


def add_speedups(rows: list[dict[str, Any]]) -> None:
    """Set each row's speed-up over the eager and the compiled reference of its workload."""
    by_mode = {r["mode"]: r.get("request_s") for r in rows if not r.get("error")}
    for row in rows:
        if row.get("error") or not row.get("request_s"):
            continue
        for key, mode in (
            ("speedup_vs_diffusers", "diffusers"),
            ("speedup_vs_compiled", "diffusers-compiled"),
        ):
            if by_mode.get(mode):
                row[key] = round(by_mode[mode] / row["request_s"], 3)


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a fixed-width text table (what the command prints at the end)."""
    head = (
        "workload",
        "mode",
        "load s",
        "first s",
        "request s",
        "s/step",
        "peak GiB",
        "PSNR",
        "x diffusers",
    )
    keys = (
        "load_s",
        "first_request_s",
        "request_s",
        "sec_per_step",
        "peak_memory_gib",
        "psnr_vs_diffusers_db",
        "speedup_vs_diffusers",
    )
    table = [head]
    errors = []
    for r in rows:
        if r.get("error"):
            errors.append(f"{r['workload']}  {r['mode']}  error: {r['error']}")
        else:
            table.append((r["workload"], r["mode"], *(_fmt(r.get(k)) for k in keys)))
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(line)).rstrip() for line in table]
    return "\n".join(lines + errors)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


__all__ = [
    "LIBRARIES",
    "ResultFile",
    "add_speedups",
    "device_name",
    "format_table",
    "load_rows",
    "versions",
]
