"""The ``npu-fusion`` attention backend: torch_npu's fused attention (``npu_fusion_attention``).

omni hands every backend q/k/v as ``[batch, seq, heads, head_dim]`` and an optional mask in
PyTorch SDPA's convention. ``npu_fusion_attention`` differs in three ways that this module
bridges, without any host sync:

- layout: omni's ``[B, S, H, D]`` is the kernel's ``"BSND"`` layout, so nothing is transposed;
  ``head_num`` is the query head count and ``scale`` must be passed (the kernel's default is 1).
- boolean masks: SDPA's ``True`` means *attend*; the kernel's ``True`` means *masked out*. The
  kernel takes the shapes ``[B,N,Sq,Skv]``, ``[B,1,Sq,Skv]``, ``[1,1,Sq,Skv]`` and ``[Sq,Skv]``
  only, so broadcast dimensions (a key-padding mask ``[B,1,1,Skv]``) are expanded.
- float (additive) masks have no boolean equivalent; they go in as ``pse``, which the kernel adds
  *before* scaling (``softmax(scale * (pse + q @ k^T))``), so ``pse = mask / scale``.

Inputs the kernel cannot take (float32, a head size that is not a multiple of 16 or above 512)
run through torch SDPA instead: the choice depends on dtypes and shapes only, never on values.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from omni_core import Availability

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: Largest head size the fused kernel takes; head sizes must also be multiples of 16.
MAX_HEAD_DIM = 512
KERNEL_DTYPES = ("float16", "bfloat16")


def kernel_accepts(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether the fused kernel can take these inputs (dtype and shape checks only)."""
    head_dim = q.shape[-1]
    return (
        str(q.dtype).removeprefix("torch.") in KERNEL_DTYPES
        and head_dim % 16 == 0
        and head_dim <= MAX_HEAD_DIM
        and q.shape[2] % k.shape[2] == 0
    )


def to_fusion_masks(
    attn_mask: torch.Tensor | None,
    *,
    batch: int,
    heads: int,
    seq_q: int,
    seq_kv: int,
    scale: float,
    dtype: torch.dtype,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Turn an SDPA-style mask into ``(atten_mask, pse)`` for ``npu_fusion_attention``.

    Boolean masks become ``atten_mask`` (True = masked out) in one of the kernel's shapes; float
    masks become ``pse`` of shape ``[B or 1, heads, seq_q, seq_kv]``, divided by ``scale``.
    """
    if attn_mask is None:
        return None, None
    import torch

    mask = attn_mask
    if mask.dim() > 4:
        raise ValueError(f"attn_mask must have at most 4 dims, got shape {tuple(mask.shape)}")
    while mask.dim() < 4:  # SDPA broadcasts from the right: [Sq,Skv] -> [1,1,Sq,Skv]
        mask = mask.unsqueeze(0)
    mb, mh, mq, mk = mask.shape
    fits = mb in (1, batch) and mh in (1, heads) and mq in (1, seq_q) and mk in (1, seq_kv)
    if not fits:
        raise ValueError(
            f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to "
            f"[{batch}, {heads}, {seq_q}, {seq_kv}]"
        )
    if mask.dtype == torch.bool:
        # [1,N,Sq,Skv] is not a kernel shape: a per-head mask needs the batch dimension too.
        rows = batch if (mh != 1 and mb == 1) else mb
        return torch.logical_not(mask.expand(rows, mh, seq_q, seq_kv)), None
    if mask.is_floating_point():
        pse = (mask.to(torch.float32) / scale).to(dtype)
        return None, pse.expand(mb, heads, seq_q, seq_kv).contiguous()
    raise TypeError(f"attn_mask must be bool or floating point, got {mask.dtype}")


def npu_fusion(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention over ``[B, S, H, D]`` on torch_npu's fused kernel (SDPA where it cannot run)."""
    if not kernel_accepts(q, k):
        from omni_core.runtime import sdpa

        return sdpa(q, k, v, attn_mask=attn_mask, scale=scale)
    import torch_npu

    batch, seq_q, heads, head_dim = q.shape
    scale = head_dim**-0.5 if scale is None else float(scale)
    atten_mask, pse = to_fusion_masks(
        attn_mask,
        batch=batch,
        heads=heads,
        seq_q=seq_q,
        seq_kv=k.shape[1],
        scale=scale,
        dtype=q.dtype,
    )
    outputs = torch_npu.npu_fusion_attention(
        q,
        k,
        v,
        heads,
        "BSND",
        pse=pse,
        atten_mask=atten_mask,
        scale=scale,
        keep_prob=1.0,
    )
    return outputs[0]


def fusion_available() -> Availability:
    """Availability of ``npu-fusion``: torch_npu imports and has the fused kernel."""
    if importlib.util.find_spec("torch_npu") is None:
        return Availability.no("torch_npu is not installed")
    try:
        import torch_npu
    except Exception as exc:  # noqa: BLE001 - a broken CANN setup must not take doctor down
        return Availability.no(f"import torch_npu failed: {type(exc).__name__}: {exc}")
    if not hasattr(torch_npu, "npu_fusion_attention"):
        return Availability.no(
            f"torch_npu {getattr(torch_npu, '__version__', '?')} has no npu_fusion_attention"
        )
    return Availability.yes("torch_npu.npu_fusion_attention")
