"""How an omni attention call maps onto cuDNN's fp8 SDPA graph: shapes, strides, identifiers.

Plain Python (no torch, no cudnn), so the plumbing is tested on any machine. omni hands
attention ``[batch, seq, heads, head_dim]`` tensors; cuDNN's graph API describes attention
tensors with *logical* dims ``(batch, heads, seq, dim)`` and arbitrary strides, so a contiguous
``[B, S, H, D]`` tensor is described, without a copy, by the strides of :func:`bhsd_layout`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

#: Largest head dim cuDNN's Hopper fp8 attention takes (and it must be a multiple of 16).
MAX_HEAD_DIM = 256
HEAD_DIM_MULTIPLE = 16


class Uid(IntEnum):
    """The graph's tensor identifiers (the variant pack is keyed by them)."""

    Q = 1
    K = 2
    V = 3
    O = 4  # noqa: E741 - cuDNN's name for the output
    SEQ_LEN_Q = 13
    SEQ_LEN_KV = 14
    DESCALE_Q = 5
    DESCALE_K = 6
    DESCALE_V = 7
    DESCALE_S = 8
    SCALE_S = 9
    SCALE_O = 10
    AMAX_S = 11
    AMAX_O = 12


@dataclass(frozen=True)
class GraphKey:
    """Everything a built graph depends on: one graph per distinct key is built and cached."""

    batch: int
    heads: int
    q_len: int
    kv_len: int
    head_dim: int
    value_dim: int
    attn_scale: float
    device: int
    #: Keys padded per batch row (``seq_len_kv``): a key-padding mask, its valid keys first.
    padded: bool = False


def bhsd_layout(batch: int, seq: int, heads: int, dim: int) -> tuple[tuple[int, ...], ...]:
    """``(dims, strides)`` cuDNN takes for a contiguous ``[batch, seq, heads, dim]`` tensor:
    logical ``(batch, heads, seq, dim)`` over the ``[B, S, H, D]`` memory."""
    dims = (batch, heads, seq, dim)
    strides = (seq * heads * dim, dim, heads * dim, 1)
    return dims, strides


def unsupported_reason(
    q_shape: tuple[int, ...], k_shape: tuple[int, ...], v_shape: tuple[int, ...]
) -> str | None:
    """Why cuDNN's fp8 attention cannot take these ``[B, S, H, D]`` shapes (None: it can)."""
    if not (len(q_shape) == len(k_shape) == len(v_shape) == 4):
        return "q, k and v must be [batch, seq, heads, head_dim]"
    (b, _, h, d), (bk, sk, hk, dk), (bv, sv, hv, dv) = q_shape, k_shape, v_shape
    if not (b == bk == bv) or sk != sv:
        return f"batch or key length differ: q {q_shape}, k {k_shape}, v {v_shape}"
    if not (h == hk == hv):
        return f"grouped heads (q {h}, k {hk}, v {hv}) are not taken"
    if d != dk:
        return f"q and k head dims differ ({d} vs {dk})"
    for name, dim in (("head dim", d), ("value head dim", dv)):
        if dim % HEAD_DIM_MULTIPLE or dim > MAX_HEAD_DIM:
            return f"{name} {dim} is not a multiple of {HEAD_DIM_MULTIPLE} up to {MAX_HEAD_DIM}"
    return None


def graph_key(
    q_shape: tuple[int, ...],
    k_shape: tuple[int, ...],
    v_shape: tuple[int, ...],
    attn_scale: float,
    device: int,
    padded: bool = False,
) -> GraphKey:
    """The cache key of a call with these (supported) ``[B, S, H, D]`` shapes."""
    b, s, h, d = q_shape
    return GraphKey(b, h, s, k_shape[1], d, v_shape[3], float(attn_scale), device, padded)


def is_key_padding_mask(
    mask_shape: tuple[int, ...], mask_is_bool: bool, batch: int, keys: int
) -> bool:
    """Whether a mask only drops keys, the same for every head and query: boolean
    ``[batch or 1, 1, 1, keys]`` (diffusers' text-padding masks, e.g. Qwen-Image's batched CFG).
    Such a call is exact with the valid keys moved first and cuDNN's padding mask
    (``seq_len_kv``); shapes only, so it costs nothing under ``torch.compile``."""
    return (
        mask_is_bool
        and len(mask_shape) == 4
        and mask_shape[0] in (1, batch)
        and tuple(mask_shape[1:]) == (1, 1, keys)
    )


def attention_flops(key: GraphKey) -> int:
    """Multiply-adds x 2 of the two matmuls (``QK^T`` and ``PV``): what TFLOP/s is reported on."""
    per_head = 2 * key.q_len * key.kv_len * (key.head_dim + key.value_dim)
    return key.batch * key.heads * per_head


__all__ = [
    "HEAD_DIM_MULTIPLE",
    "MAX_HEAD_DIM",
    "GraphKey",
    "Uid",
    "attention_flops",
    "bhsd_layout",
    "graph_key",
    "is_key_padding_mask",
    "unsupported_reason",
]
