"""Benchmarks of registered pipelines against their reference, through the real request path.

A model plugin describes a workload (a real-layout checkpoint, a request, the reference pipeline
that serves the same checkpoint) by subclassing :class:`Workload` and registering an instance as a
:class:`~omni_core.contract.registry.BenchmarkSpec`. :func:`run_benchmark` (``omni bench pipeline``)
builds each workload's checkpoint folder once, then loads and runs it in one process with the
reference (eager and compiled) and with ``Omni(folder)``: the code ``omni serve`` runs, never a copy
of it.

Importing this package is cheap (no torch): the runner's modules are imported on first use.
"""

from omni_core.contract.faces import Face

_face = Face(
    __name__,
    {
        "omni_core.bench.workload": ("Workload", "write_random_model"),
        "omni_core.bench.runner": ("BenchOptions", "run_benchmark", "select_workloads"),
        "omni_core.bench.weights": ("materialize_random_",),
    },
)
__getattr__, __dir__, __all__ = _face.getattr, _face.dir, _face.names
