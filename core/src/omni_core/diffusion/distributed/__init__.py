"""Multi-device inference: CFG-parallel and Ulysses sequence parallelism over torch.distributed.

The pieces, from the outside in:

- :mod:`~omni_core.diffusion.distributed.layout` checks a
  :class:`~omni_core.contract.config.ParallelConfig` against the machine and the model *before*
  anything is spawned (``ConfigError`` otherwise).
- :mod:`~omni_core.diffusion.distributed.launcher` spawns one worker process per device; rank 0
  receives requests, broadcasts them, every rank runs the same program in lock-step
  (:mod:`~omni_core.diffusion.distributed.worker`), and only rank 0's result comes back. A dead
  worker fails its requests and marks the group unhealthy.
- :mod:`~omni_core.diffusion.distributed.groups` builds the cfg and ulysses process groups in a
  worker and exposes them as the process's :class:`ParallelState`.
- :mod:`~omni_core.diffusion.distributed.cfg` and :mod:`~omni_core.diffusion.distributed.ulysses`
  are the two primitives a pipeline's ``step()`` uses;
  :mod:`~omni_core.diffusion.distributed.parallelize` applies them to a denoiser (the Ulysses plan
  comes from its model plugin's ``DenoiserSpec``).

Nothing here imports torch at package import time, so ``omni --help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ParallelLayout": "layout",
    "validate_layout": "layout",
    "checkpoint_num_heads": "layout",
    "ParallelState": "groups",
    "current_parallel_state": "groups",
    "init_parallel_state": "groups",
    "cfg_parallel_forward": "cfg",
    "SequenceParallel": "ulysses",
    "ulysses_attention": "ulysses",
    "shard_sizes": "ulysses",
    "ParallelLauncher": "launcher",
    "WorkerContext": "worker",
    "WorkerProgram": "worker",
    "WorkerDiedError": "errors",
    "DistributedError": "errors",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'omni_core.diffusion.distributed' has no attribute {name!r}")
    return getattr(importlib.import_module(f"omni_core.diffusion.distributed.{module}"), name)
