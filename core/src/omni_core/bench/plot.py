"""A PNG of the rows: one panel per workload, end-to-end request seconds per mode.

Bars are labelled with the peak memory and, for omni's modes, the speed-up over diffusers eager.
matplotlib draws it when installed (``omni-core[bench]``); otherwise Pillow (a diffusers
dependency) draws the same bars; without either no plot is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

REFERENCE_GREY = "#888888"
OMNI_BLUE = "#2a7ab9"


def _panels(rows: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    return [(w, [r for r in rows if r["workload"] == w and r.get("request_s")]) for w in workloads]


def _title(workload: str, sub: list[dict[str, Any]]) -> str:
    """The workload, with a reduced layer count and the steps, so a small run is not misread."""
    if not sub:
        return workload
    layers, steps = sub[0].get("layers"), (sub[0].get("request") or {}).get("num_inference_steps")
    facts = [f"{layers} layers"] if layers else []
    facts += [f"{steps} steps"] if steps else []
    return f"{workload} ({', '.join(facts)})" if facts else workload


def _label(row: dict[str, Any]) -> str:
    parts = [f"{row['request_s']:.3g}s"]
    if row.get("peak_memory_gib") is not None:
        parts.append(f"{row['peak_memory_gib']:.3g}G")
    if row.get("backend") == "omni" and row.get("speedup_vs_diffusers"):
        parts.append(f"{row['speedup_vs_diffusers']:.2f}x")
    return " ".join(parts)


def write_plot(rows: list[dict[str, Any]], path: Path) -> Path | None:
    """Draw the rows to ``path`` (PNG); returns it, or None when nothing could draw it."""
    panels = _panels(rows)
    if not any(sub for _, sub in panels):
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return _plot_with_pillow(panels, path)
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.2), squeeze=False)
    for ax, (workload, sub) in zip(axes[0], panels, strict=True):
        values = [r["request_s"] for r in sub]
        colors = [REFERENCE_GREY if r["backend"] != "omni" else OMNI_BLUE for r in sub]
        ax.bar(range(len(sub)), values, color=colors)
        ax.set_xticks(range(len(sub)), [r["mode"] for r in sub], fontsize=7, rotation=20)
        ax.set_title(_title(workload, sub), fontsize=9)
        ax.set_ylabel("end-to-end request (s)")
        for i, r in enumerate(sub):
            ax.text(i, values[i], _label(r), ha="center", va="bottom", fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_with_pillow(panels: list[tuple[str, list[dict[str, Any]]]], path: Path) -> Path | None:
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        return None
    panel_w, panel_h, top, bottom = 440, 320, 30, 50
    image = Image.new("RGB", (panel_w * max(len(panels), 1), panel_h), "white")
    draw = ImageDraw.Draw(image)
    for k, (workload, sub) in enumerate(panels):
        x0 = k * panel_w
        draw.text((x0 + 10, 8), f"{_title(workload, sub)}: request s", fill="black")
        if not sub:
            continue
        top_value = max(r["request_s"] for r in sub)
        bar_w = (panel_w - 40) // len(sub)
        for i, r in enumerate(sub):
            h = int((panel_h - top - bottom) * r["request_s"] / top_value)
            left = x0 + 20 + i * bar_w
            color = (136, 136, 136) if r["backend"] != "omni" else (42, 122, 185)
            draw.rectangle(
                [left + 4, panel_h - bottom - h, left + bar_w - 4, panel_h - bottom], fill=color
            )
            draw.text((left + 4, panel_h - bottom - h - 12), _label(r)[:18], fill="black")
            draw.text((left + 4, panel_h - bottom + 6), r["mode"][:16], fill="black")
    image.save(path)
    return path


__all__ = ["write_plot"]
