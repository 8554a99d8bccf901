"""The process groups of one worker, and the process-wide :class:`ParallelState`.

A pipeline reads :func:`current_parallel_state` in ``step()``: ``None`` means single-process;
otherwise it holds the cfg and ulysses groups of this rank. Every rank must create every
group in the same order (torch.distributed's rule), which :func:`init_parallel_state` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from omni_core.diffusion.distributed.layout import ParallelLayout

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclass
class ParallelState:
    """This rank's place in the layout and its groups (``None`` for a group of size 1)."""

    layout: ParallelLayout
    rank: int
    device: torch.device
    backend: str
    cfg_group: Any = None
    ulysses_group: Any = None
    #: A gloo group over all ranks for small Python objects (requests), off the device stream.
    control_group: Any = None

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    @property
    def cfg_rank(self) -> int:
        return self.layout.cfg_rank(self.rank)

    @property
    def ulysses_rank(self) -> int:
        return self.layout.ulysses_rank(self.rank)

    @property
    def cfg_parallel(self) -> bool:
        return self.layout.cfg_parallel_size > 1

    @property
    def sequence_parallel(self) -> bool:
        return self.layout.ulysses_degree > 1

    @property
    def is_driver(self) -> bool:
        """Rank 0 receives requests and returns results."""
        return self.rank == 0


_STATE: ParallelState | None = None


def current_parallel_state() -> ParallelState | None:
    """The parallel state of this process, or None when it runs alone."""
    return _STATE


def set_parallel_state(state: ParallelState | None) -> None:
    global _STATE
    _STATE = state


def init_parallel_state(
    layout: ParallelLayout,
    rank: int,
    *,
    backend: str,
    device: torch.device,
    init_method: str,
    timeout_s: float = 600.0,
) -> ParallelState:
    """Join the process group and build the cfg, ulysses and control groups."""
    import torch.distributed as dist

    kwargs: dict[str, Any] = {}
    if backend == "nccl":
        kwargs["device_id"] = device
    dist.init_process_group(
        backend=backend,
        init_method=init_method,
        rank=rank,
        world_size=layout.world_size,
        timeout=timedelta(seconds=timeout_s),
        **kwargs,
    )
    state = ParallelState(layout=layout, rank=rank, device=device, backend=backend)
    for ranks in layout.cfg_group_ranks():
        group = dist.new_group(ranks) if len(ranks) > 1 else None
        if rank in ranks:
            state.cfg_group = group
    for ranks in layout.ulysses_group_ranks():
        group = dist.new_group(ranks) if len(ranks) > 1 else None
        if rank in ranks:
            state.ulysses_group = group
    all_ranks = list(range(layout.world_size))
    state.control_group = (
        dist.new_group(all_ranks, backend="gloo") if backend != "gloo" else dist.group.WORLD
    )
    set_parallel_state(state)
    return state


def destroy_parallel_state() -> None:
    """Leave the process group (idempotent)."""
    import torch.distributed as dist

    set_parallel_state(None)
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
