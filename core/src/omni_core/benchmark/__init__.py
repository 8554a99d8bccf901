"""Benchmarks of registered pipelines against their reference, through the real request path.

A model plugin describes a workload (a real-layout checkpoint, a request, the reference pipeline
that serves the same checkpoint) by subclassing :class:`Workload` and registering an instance as a
:class:`~omni_core.registry.BenchmarkSpec`. :func:`run_benchmark` (``omni bench pipeline``) builds
each workload's checkpoint folder once, then loads and runs it in one process with the reference
(eager and compiled) and with ``Omni(folder)``: the code ``omni serve`` runs, never a copy of it.

Importing this package is cheap (no torch): the runner's modules are imported on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from omni_core.benchmark.workload import Workload, write_random_model

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.benchmark.runner import BenchOptions, run_benchmark, select_workloads

_LAZY = {
    "BenchOptions": "omni_core.benchmark.runner",
    "run_benchmark": "omni_core.benchmark.runner",
    "select_workloads": "omni_core.benchmark.runner",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'omni_core.benchmark' has no attribute {name!r}")
    return getattr(import_module(module), name)


__all__ = ["BenchOptions", "Workload", "run_benchmark", "select_workloads", "write_random_model"]
