"""CFG-parallel: the conditional and unconditional branches on two ranks.

With classifier-free guidance every denoising step runs the denoiser twice (prompt and
negative prompt). :func:`cfg_parallel_forward` runs the branch of this rank's ``cfg_rank``
(0: conditional, 1: unconditional) and all-gathers the two predictions, so every rank holds
both and takes the same scheduler step: the ranks' latents stay bit-identical without any
further communication.

Fidelity: each rank runs a batch-1 forward, exactly as a single process that calls the
denoiser once per branch. A single process that *batches* cond and uncond into one batch-2
forward may differ in the lowest bits (matmul kernels can pick other tilings/reduction orders
for another batch size); compare like with like (see ``sdk-docs/docs/parallelism.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch


def _call(fn: Callable[..., Any], inputs: Any) -> torch.Tensor:
    if isinstance(inputs, Mapping):
        out = fn(**inputs)
    elif isinstance(inputs, Sequence) and not isinstance(inputs, str):
        out = fn(*inputs)
    else:
        out = fn(inputs)
    return out


def cfg_parallel_forward(
    fn: Callable[..., torch.Tensor],
    cond_inputs: Mapping[str, Any] | Sequence[Any],
    uncond_inputs: Mapping[str, Any] | Sequence[Any],
    group: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(cond_prediction, uncond_prediction)``, each computed once in the cfg group.

    ``fn`` must return one tensor of the same shape and dtype for both branches (pass
    ``return_dict=False`` and index ``[0]`` in ``fn`` for diffusers models). Inputs are keyword
    dicts or positional sequences. ``group`` is the cfg group of size 2
    (``ParallelState.cfg_group``); with ``None`` both branches run here, one after the other,
    so a pipeline can call this unconditionally.
    """
    if group is None:
        return _call(fn, cond_inputs), _call(fn, uncond_inputs)
    import torch
    import torch.distributed as dist

    size = dist.get_world_size(group)
    if size != 2:
        raise ValueError(f"cfg_parallel_forward needs a cfg group of 2 ranks, got {size}")
    branch = dist.get_rank(group)
    local = _call(fn, cond_inputs if branch == 0 else uncond_inputs)
    if not isinstance(local, torch.Tensor):
        kind = type(local).__name__
        raise TypeError(f"cfg_parallel_forward: fn must return a tensor, got {kind}")
    local = local.contiguous()
    gathered = [torch.empty_like(local) for _ in range(2)]
    dist.all_gather(gathered, local, group=group)
    # Our own branch is kept as computed (the gathered copy is bit-identical anyway).
    gathered[branch] = local
    return gathered[0], gathered[1]
