"""Ulysses sequence parallelism: shard tokens across ranks, all-to-all to heads for attention.

Between attention calls every rank holds a contiguous slice of the sequence (all heads).
Attention needs every token, so :func:`ulysses_attention` exchanges data with one all-to-all:
afterwards each rank holds the *full* sequence for ``heads / P`` heads, runs any omni
attention backend (``fn(q, k, v, *, attn_mask, scale)`` on ``[B, S, H, D]``) and a second
all-to-all restores the sequence slice. Attention is exact: each head sees every key.

Uneven lengths are split like :func:`torch.tensor_split` (the first ``S % P`` ranks get one
token more) and exchanged with uneven ``all_to_all_single`` split sizes, so there is no
padding at all and no key that must be masked out.

Joint attention (Qwen-Image, Flux): the text tokens are *replicated* on every rank and come
first in the joint sequence (``[text, image_shard]``). Each rank takes its head slice of the
replicated text q/k/v; the text output is all-gathered over heads so every rank again holds
the full text stream. Processors that put the text last (``[image_shard, text]``) are served
by a :class:`SequenceParallel` made with ``text_last=True`` (the plan's ``text_last``).

Masks: one over the full joint sequence, a key-padding mask of the local view, or a square
boolean mask of the local view that is *separable* (``mask[i, j] = valid[i] & valid[j]``, what
a processor builds for self-attention from a padding mask): its valid vector is gathered and
the full square mask rebuilt, so fully masked query rows stay fully masked.

Inference only: the collectives are not autograd-aware.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from omni_core.diffusion.distributed.errors import DistributedError
from omni_core.diffusion.distributed.joint_views import rotate, rotate_mask, separable_mask

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.contract.attention import AttentionRouter

AttentionFn = Callable[..., "torch.Tensor"]


def shard_sizes(length: int, parts: int) -> list[int]:
    """Sizes of ``torch.tensor_split(x, parts)``: the first ``length % parts`` get one more."""
    base, extra = divmod(length, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _all_to_all(
    out: torch.Tensor,
    inp: torch.Tensor,
    group: Any,
    out_splits: list[int] | None,
    in_splits: list[int] | None,
) -> None:
    import torch.distributed as dist

    dist.all_to_all_single(
        out, inp, output_split_sizes=out_splits, input_split_sizes=in_splits, group=group
    )


def seq_to_heads(x: torch.Tensor, sizes: list[int], rank: int, group: Any) -> torch.Tensor:
    """``[B, s_rank, H, D]`` sequence shard -> ``[B, S, H/P, D]`` full sequence, head slice."""
    import torch

    parts = len(sizes)
    b, s_local, h, d = x.shape
    if s_local != sizes[rank]:
        raise DistributedError(
            f"ulysses: rank {rank} holds {s_local} tokens, the layout says {sizes[rank]}"
        )
    hp = h // parts
    inp = x.reshape(b, s_local, parts, hp, d).permute(2, 1, 0, 3, 4).contiguous()
    inp = inp.reshape(parts * s_local, b, hp, d)
    out = torch.empty((sum(sizes), b, hp, d), dtype=x.dtype, device=x.device)
    even = all(s == sizes[0] for s in sizes)
    _all_to_all(out, inp, group, None if even else sizes, None if even else [s_local] * parts)
    out = out.permute(1, 0, 2, 3)
    # Batch > 1 leaves the sequence stride over the batch: give kernels the usual layout.
    return out.contiguous() if b > 1 else out


def heads_to_seq(x: torch.Tensor, sizes: list[int], rank: int, group: Any) -> torch.Tensor:
    """Inverse of :func:`seq_to_heads`: ``[B, S, H/P, D]`` -> ``[B, s_rank, H, D]``."""
    import torch

    parts = len(sizes)
    b, _, hp, d = x.shape
    s_local = sizes[rank]
    inp = x.permute(1, 0, 2, 3).contiguous()
    out = torch.empty((parts * s_local, b, hp, d), dtype=x.dtype, device=x.device)
    even = all(n == sizes[0] for n in sizes)
    _all_to_all(out, inp, group, None if even else [s_local] * parts, None if even else sizes)
    out = out.reshape(parts, s_local, b, hp, d).permute(2, 1, 0, 3, 4)
    return out.reshape(b, s_local, hp * parts, d)


def gather_sequence(x: torch.Tensor, sizes: list[int], group: Any, dim: int = 1) -> torch.Tensor:
    """Concatenate every rank's shard along ``dim`` (shards of ``sizes``, in rank order)."""
    import torch
    import torch.distributed as dist

    longest = max(sizes)
    as_bool = x.dtype == torch.bool
    x = (x.to(torch.uint8) if as_bool else x).contiguous()  # gloo has no bool collectives
    if x.shape[dim] < longest:  # uneven: pad to a common size, trim after the gather
        pad_shape = list(x.shape)
        pad_shape[dim] = longest - x.shape[dim]
        x = torch.cat([x, x.new_zeros(pad_shape)], dim=dim)
    chunks = [torch.empty_like(x) for _ in sizes]
    dist.all_gather(chunks, x, group=group)
    out = torch.cat([c.narrow(dim, 0, n) for c, n in zip(chunks, sizes, strict=True)], dim=dim)
    return out.bool() if as_bool else out


def _head_slice(x: torch.Tensor, rank: int, parts: int) -> torch.Tensor:
    hp = x.shape[2] // parts
    return x[:, :, rank * hp : (rank + 1) * hp]


def _gather_heads(x: torch.Tensor, parts: int, group: Any) -> torch.Tensor:
    import torch
    import torch.distributed as dist

    x = x.contiguous()
    chunks = [torch.empty_like(x) for _ in range(parts)]
    dist.all_gather(chunks, x, group=group)
    return torch.cat(chunks, dim=2)


def _mask_for_heads(mask: torch.Tensor | None, rank: int, parts: int, heads: int) -> Any:
    """Slice a ``[B, H, Sq, Sk]`` mask to this rank's heads (broadcast head dims pass as-is)."""
    if mask is None or mask.dim() != 4 or mask.shape[1] == 1:
        return mask
    if mask.shape[1] != heads:
        raise DistributedError(f"ulysses: attn_mask has {mask.shape[1]} heads, q has {heads}")
    hp = heads // parts
    return mask[:, rank * hp : (rank + 1) * hp]


def ulysses_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    inner: AttentionFn,
    group: Any,
    sizes: list[int],
    rank: int,
    replicated_prefix: int = 0,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention over the whole sequence from sequence shards; returns this rank's shard.

    ``q, k, v``: ``[B, replicated_prefix + sizes[rank], H, D]`` — ``replicated_prefix``
    tokens identical on every rank (joint attention's text), then this rank's shard.
    ``attn_mask`` (optional) must be laid out for the *full* joint sequence
    (``replicated_prefix + sum(sizes)`` keys), as the single-process call would pass it.
    """
    import torch

    parts = len(sizes)
    heads = q.shape[2]
    if heads % parts or k.shape[2] % parts:
        raise DistributedError(f"ulysses: {heads} heads do not split over a group of {parts} ranks")
    full = replicated_prefix + sum(sizes)
    local = replicated_prefix + sizes[rank]
    if attn_mask is not None and attn_mask.shape[-1] not in (1, full):
        if tuple(attn_mask.shape[-2:]) == (local, local):
            # A square mask of the local view (queries and keys): separable, rebuilt whole.
            attn_mask = separable_mask(
                attn_mask,
                replicated_prefix,
                lambda valid: gather_sequence(valid, sizes, group, dim=-1),
            )
        elif attn_mask.shape[-1] != local or attn_mask.shape[-2] != 1:
            raise DistributedError(
                f"ulysses: attn_mask covers {attn_mask.shape[-1]} keys; it must cover the full "
                f"joint sequence ({full} keys) or, as a key-padding mask or a separable square "
                f"mask, this rank's {local} tokens"
            )
        else:
            # A key-padding mask built from the local view (e.g. Qwen-Image's processor builds
            # [text mask, ones(local image)]): its shard columns are gathered from every rank.
            shard_cols = gather_sequence(attn_mask[..., replicated_prefix:], sizes, group, dim=-1)
            attn_mask = torch.cat([attn_mask[..., :replicated_prefix], shard_cols], dim=-1)
    t = replicated_prefix
    # q, k and v travel in one all-to-all (stacked on the batch dim): one collective per
    # attention call instead of three.
    b = q.shape[0]
    fused = q.shape == k.shape == v.shape
    if t:
        qt, kt, vt = (_head_slice(x[:, :t], rank, parts) for x in (q, k, v))
        if fused:
            stacked = torch.cat([q[:, t:], k[:, t:], v[:, t:]], dim=0)
            qs, ks, vs = seq_to_heads(stacked, sizes, rank, group).split(b, dim=0)
        else:
            qs, ks, vs = (seq_to_heads(x[:, t:], sizes, rank, group) for x in (q, k, v))
        qf, kf, vf = (_cat(x, y) for x, y in ((qt, qs), (kt, ks), (vt, vs)))
    elif fused:
        qf, kf, vf = seq_to_heads(torch.cat([q, k, v], dim=0), sizes, rank, group).split(b, dim=0)
    else:
        qf, kf, vf = (seq_to_heads(x, sizes, rank, group) for x in (q, k, v))
    mask = _mask_for_heads(attn_mask, rank, parts, heads)
    out = inner(qf, kf, vf, attn_mask=mask, scale=scale)
    if not t:
        return heads_to_seq(out, sizes, rank, group)
    text = _gather_heads(out[:, :t], parts, group)
    image = heads_to_seq(out[:, t:], sizes, rank, group)
    return _cat(text, image)


def _cat(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.cat([a, b], dim=1)


class SequenceParallel:
    """One ulysses group's sequence layout: shard/gather helpers and the attention wrapper.

    Typical use in a transformer forward (hooks in :func:`sequence_parallel_blocks` do this)::

        x = sp.shard(hidden_states, dim=1)       # before the blocks: records the layout
        rope = sp.slice(rotary_freqs, dim=1)     # every per-token input, same slices
        ...blocks, attention through sp.attention(inner) / sp.router(router)...
        hidden_states = sp.gather(x, dim=1)      # after the blocks

    Rotary embeddings are computed for the *full* sequence (positions depend on the token's
    place in the whole video/image) and then sliced exactly like the hidden states; never
    recompute them from the local shard's shape.
    """

    def __init__(self, group: Any, *, text_last: bool = False) -> None:
        import torch.distributed as dist

        self.group = group
        #: Joint attention's replicated tokens come after the shard (``[shard, text]``).
        self.text_last = text_last
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.seq_len: int | None = None
        self.sizes: list[int] | None = None

    # -- layout --------------------------------------------------------------------------------
    def set_length(self, seq_len: int) -> list[int]:
        """Record the full sequence length of the current forward; returns the shard sizes."""
        if seq_len < self.world_size:
            raise DistributedError(
                f"ulysses: a sequence of {seq_len} tokens cannot be split over "
                f"{self.world_size} ranks"
            )
        if seq_len != self.seq_len:
            self.seq_len = seq_len
            self.sizes = shard_sizes(seq_len, self.world_size)
        assert self.sizes is not None
        return self.sizes

    @property
    def offset(self) -> int:
        assert self.sizes is not None
        return sum(self.sizes[: self.rank])

    @property
    def local_len(self) -> int:
        if self.sizes is None:
            raise DistributedError("ulysses: no sequence layout yet (call shard() first)")
        return self.sizes[self.rank]

    def shard(self, x: torch.Tensor, dim: int = 1) -> torch.Tensor:
        """This rank's contiguous slice of the full sequence ``x`` (records the layout)."""
        self.set_length(x.shape[dim])
        return x.narrow(dim, self.offset, self.local_len)

    def slice(self, x: torch.Tensor, dim: int = 1) -> torch.Tensor:
        """Slice another per-token tensor (rope, per-token timestep) like the last shard()."""
        if x.shape[dim] != self.seq_len:
            raise DistributedError(
                f"ulysses: tensor has {x.shape[dim]} tokens along dim {dim}, "
                f"the sharded sequence has {self.seq_len}"
            )
        return x.narrow(dim, self.offset, self.local_len)

    def gather(self, x: torch.Tensor, dim: int = 1) -> torch.Tensor:
        """The full sequence from every rank's shard (inverse of :meth:`shard`)."""
        if self.sizes is None:
            raise DistributedError("ulysses: gather() before shard()")
        return gather_sequence(x, self.sizes, self.group, dim)

    # -- attention ------------------------------------------------------------------------------
    def attention(self, inner: AttentionFn) -> AttentionFn:
        """Wrap an omni attention backend: self attention, or joint with a replicated prefix.

        The replicated prefix (text) length is whatever precedes this rank's shard in q:
        ``q.shape[1] - local_len``.
        """

        def run(
            q: torch.Tensor,
            k: torch.Tensor,
            v: torch.Tensor,
            *,
            attn_mask: torch.Tensor | None = None,
            scale: float | None = None,
        ) -> torch.Tensor:
            sizes = self.sizes
            if sizes is None:
                raise DistributedError("ulysses: attention called before shard()")
            prefix = q.shape[1] - sizes[self.rank]
            if prefix < 0 or k.shape[1] != q.shape[1]:
                raise DistributedError(
                    f"ulysses: q has {q.shape[1]} tokens, k {k.shape[1]}, this rank's shard "
                    f"{sizes[self.rank]}; self/joint attention needs q and k over the same tokens"
                )
            local = sizes[self.rank]
            if self.text_last and prefix:  # [shard, text] -> [text, shard] and back
                q, k, v = (rotate(x, local) for x in (q, k, v))
                if attn_mask is not None:
                    attn_mask = rotate_mask(attn_mask, local, q.shape[1])
            out = ulysses_attention(
                q,
                k,
                v,
                inner=inner,
                group=self.group,
                sizes=sizes,
                rank=self.rank,
                replicated_prefix=prefix,
                attn_mask=attn_mask,
                scale=scale,
            )
            return rotate(out, prefix) if self.text_last and prefix else out

        run.__name__ = f"ulysses_{getattr(inner, '__name__', 'attention')}"
        return run

    def router(self, router: AttentionRouter) -> AttentionRouter:
        """A router whose self and joint roles run Ulysses; cross attention stays local.

        Cross attention (image queries, text keys) needs no exchange: each query shard attends
        to the full, replicated text on its own rank.
        """
        from omni_core.contract.attention import AttentionRouter

        functions = dict(router.functions)
        names = dict(router.names)
        for role in ("self", "joint"):
            functions[role] = self.attention(router.functions[role])
            names[role] = f"ulysses({router.names[role]})"
        return AttentionRouter(functions=functions, names=names)


ShardInputs = Callable[["SequenceParallel", tuple, dict, bool], "tuple[tuple, dict]"]
GatherOutput = Callable[["SequenceParallel", Any], Any]


def sequence_parallel_blocks(
    blocks: Any,
    sp: SequenceParallel,
    shard_inputs: ShardInputs,
    gather_output: GatherOutput,
) -> list[Any]:
    """Install hooks on a transformer's block list: shard before the blocks, gather after.

    ``shard_inputs(sp, args, kwargs, first)`` runs before every block (``first`` for block 0,
    which receives the full hidden states; the others receive shards but the same full
    per-token side inputs such as rope) and returns the new ``(args, kwargs)``.
    ``gather_output(sp, output)`` runs on the last block's output. Returns the hook handles
    (``handle.remove()`` undoes it).
    """
    blocks = list(blocks)
    handles = []
    for i, block in enumerate(blocks):
        first = i == 0

        def pre(_module: Any, args: tuple, kwargs: dict, _first: bool = first) -> Any:
            return shard_inputs(sp, args, kwargs, _first)

        handles.append(block.register_forward_pre_hook(pre, with_kwargs=True))
    handles.append(blocks[-1].register_forward_hook(lambda _m, _a, out: gather_output(sp, out)))
    return handles
