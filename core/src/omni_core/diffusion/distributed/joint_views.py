"""Views of a joint (text + shard) attention call that Ulysses reshapes: the text moved from
after the shard to before it (and back), and a separable square mask of the local view made
into the full sequence's.

Separate from :mod:`.ulysses` so that module keeps to the exchange itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from omni_core.diffusion.distributed.errors import DistributedError

if TYPE_CHECKING:  # pragma: no cover
    import torch


def rotate(x: torch.Tensor, first: int) -> torch.Tensor:
    """``x`` with its first ``first`` tokens (dim 1) moved to the end."""
    import torch

    return torch.cat([x[:, first:], x[:, :first]], dim=1)


def rotate_mask(mask: torch.Tensor, first: int, tokens: int) -> torch.Tensor:
    """A mask's token axes rotated like :func:`rotate` (an axis of size 1 broadcasts)."""
    import torch

    for dim in (-2, -1):
        if mask.shape[dim] == tokens:
            moved = mask.narrow(dim, first, tokens - first), mask.narrow(dim, 0, first)
            mask = torch.cat(moved, dim)
    return mask


def separable_mask(
    mask: torch.Tensor, prefix: int, gather: Callable[[torch.Tensor], torch.Tensor]
) -> Any:
    """The full square mask from a separable square boolean mask of the local joint view
    (``[replicated prefix, shard]`` on both axes, ``mask[i, j] = valid[i] & valid[j]``): the
    shard part of its query and key valid vectors is ``gather``-ed from every rank and the full
    mask is their outer AND, so fully masked query rows stay fully masked."""
    import torch

    if mask.dtype != torch.bool:
        raise DistributedError(
            "ulysses: a square attn_mask over the local tokens must be boolean and separable "
            "(query padding & key padding); pass one over the full sequence instead"
        )

    def full(valid: torch.Tensor) -> torch.Tensor:  # [..., 1, local] -> [..., 1, full]
        return torch.cat([valid[..., :prefix], gather(valid[..., prefix:])], dim=-1)

    keys = full(mask.any(dim=-2, keepdim=True))
    queries = full(mask.any(dim=-1, keepdim=True).transpose(-1, -2))
    return queries.transpose(-1, -2) & keys
