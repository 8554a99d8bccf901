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

from omni_core.contract.faces import Face

_base = "omni_core.diffusion.distributed"
_face = Face(
    __name__,
    {
        f"{_base}.layout": ("ParallelLayout", "validate_layout", "checkpoint_num_heads"),
        f"{_base}.groups": ("ParallelState", "current_parallel_state", "init_parallel_state"),
        f"{_base}.cfg": ("cfg_parallel_forward",),
        f"{_base}.ulysses": ("SequenceParallel", "ulysses_attention", "shard_sizes"),
        f"{_base}.launcher": ("ParallelLauncher",),
        f"{_base}.worker": ("WorkerContext", "WorkerProgram"),
        f"{_base}.errors": ("WorkerDiedError", "DistributedError"),
    },
)
__getattr__, __dir__, __all__ = _face.getattr, _face.dir, _face.names
