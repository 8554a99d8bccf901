"""Ulysses for attention whose queries are whole and whose keys are this rank's shard.

A block with a second stream that is not sharded (LTX-2's audio tokens, replicated on every
rank) may attend from that stream to the sharded one (LTX-2's video-to-audio attention: audio
queries, video keys). Every query needs every key, so the keys and values (after the module's
own rotary embedding, as the processor hands them to the kernel) are gathered over the
sequence, in rank order, and the pipeline's own kernel runs on the whole sequence; every rank
then holds the same output, as the replicated stream requires. A key-padding mask of the shard
is gathered the same way. Exact: the kernel sees what it sees in one process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omni_core.diffusion.distributed.errors import DistributedError
from omni_core.diffusion.distributed.ulysses import gather_sequence

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.contract.attention import AttentionRouter
    from omni_core.diffusion.distributed.ulysses import AttentionFn, SequenceParallel


def gather_keys(sp: SequenceParallel, inner: AttentionFn) -> AttentionFn:
    """``inner`` over the whole sequence of keys: this rank's shard of k / v gathered first."""

    def run(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        attn_mask: torch.Tensor | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        sizes = sp.sizes
        if sizes is None:
            raise DistributedError("ulysses: attention called before shard()")
        local = sizes[sp.rank]
        if k.shape[1] != local:
            raise DistributedError(
                f"ulysses: keys of {k.shape[1]} tokens, this rank's shard is {local}: a "
                "'gather_keys' attention must take its keys from the sharded stream"
            )
        k, v = (gather_sequence(x, sizes, sp.group, dim=1) for x in (k, v))
        if attn_mask is not None and attn_mask.shape[-1] == local:
            attn_mask = gather_sequence(attn_mask, sizes, sp.group, dim=attn_mask.dim() - 1)
        return inner(q, k, v, attn_mask=attn_mask, scale=scale)

    run.__name__ = f"ulysses_gather_keys_{getattr(inner, '__name__', 'attention')}"
    return run


def gather_keys_router(sp: SequenceParallel, router: AttentionRouter) -> AttentionRouter:
    """``router`` with every role's kernel run by :func:`gather_keys`."""
    from omni_core.contract.attention import AttentionRouter

    return AttentionRouter(
        functions={r: gather_keys(sp, f) for r, f in router.functions.items()},
        names={r: f"ulysses-gather-keys({n})" for r, n in router.names.items()},
    )


def route_plan_attention(block: Any, how: dict[str, str], routers: dict[str, Any]) -> None:
    """Route the attention modules a plan names in one block (``how``: name -> kind)."""
    from omni_core.diffusion.attention_routing import route_attention

    for name, kind in how.items():
        try:
            module = block.get_submodule(name)
        except AttributeError:
            raise DistributedError(
                f"ulysses: the sequence plan names attention {name!r}, which "
                f"{type(block).__name__} does not have"
            ) from None
        if kind not in routers:
            raise DistributedError(
                f"ulysses: attention {name!r} is {kind!r}; use 'sharded', 'local' or 'gather_keys'"
            )
        route_attention(module, routers[kind])
