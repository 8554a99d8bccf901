"""Health and Prometheus metrics of every replica: each replica pushes its status and its own
``/metrics`` text to one small actor (the board) every few seconds; the ingress answers
``/health`` and ``/metrics`` from it, every sample labelled with its ``replica``.

Why a board: Ray Serve routes a call to *some* replica of a deployment, never to each one, so
the ingress cannot ask them all; replicas that died stop reporting and age out.
"""

from __future__ import annotations

import time
from typing import Any

#: The board's actor name (namespace ``serve``), one per Ray cluster.
BOARD_NAME = "omni-board"


class MetricsBoard:
    """The latest report of every replica (a Ray actor: see :func:`board`)."""

    def __init__(self) -> None:
        self.reports: dict[str, dict[str, Any]] = {}

    def put(self, replica: str, model: str, status: str, metrics: str, pid: int) -> None:
        self.reports[replica] = {
            "model": model,
            "status": status,
            "metrics": metrics,
            "pid": pid,
            "at": time.time(),
        }

    def drop(self, replica: str) -> None:
        self.reports.pop(replica, None)

    def collect(self, stale_s: float) -> dict[str, dict[str, Any]]:
        now = time.time()
        for replica in [r for r, v in self.reports.items() if now - v["at"] > stale_s]:
            del self.reports[replica]
        return dict(self.reports)


def board() -> Any:
    """The cluster's board actor, started if absent (detached: it outlives a redeploy)."""
    import ray

    actor = ray.remote(num_cpus=0)(MetricsBoard)
    return actor.options(
        name=BOARD_NAME, namespace="serve", lifetime="detached", get_if_exists=True
    ).remote()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _value(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else f"{value:.1f}"


def merge_metrics(texts: dict[str, tuple[str, str]]) -> str:
    """``{replica: (model, prometheus text)}`` -> one exposition, every sample labelled with
    ``replica`` (one HELP/TYPE per family)."""
    from prometheus_client.parser import text_string_to_metric_families

    families: dict[str, tuple[str, str, list[str]]] = {}
    for replica in sorted(texts):
        _, text = texts[replica]
        for family in text_string_to_metric_families(text):
            name = family.name + ("_total" if family.type == "counter" else "")
            _, _, lines = families.setdefault(name, (family.type, family.documentation, []))
            for sample in family.samples:
                labels = {**sample.labels, "replica": replica}
                rendered = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(labels.items()))
                lines.append(f"{sample.name}{{{rendered}}} {_value(sample.value)}")
    out = []
    for name, (kind, documentation, lines) in families.items():
        out.append(f"# HELP {name} {documentation}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(lines)
    return "\n".join(out) + "\n"
