"""``fp8-emulated``: the fp8 attention's arithmetic in torch, on any device.

The same recipe as ``fp8-cudnn`` (:mod:`omni_attention_fp8.scales`): q, centred k and v are
quantized to float8_e4m3fn with the same per-(batch, head) scales, ``QK^T`` runs on the fp8
values and is descaled by the same scalar, the probabilities are quantized to fp8 with
:data:`~omni_attention_fp8.scales.P_SCALE` before ``PV`` and normalised by their float32 sum,
and the output is rounded to fp8 per head before it is dequantized, as cuDNN's Hopper kernel
does. It computes the softmax in one pass per query block where cuDNN's flash kernel tiles the
keys, so the two agree to fp8 rounding, not bit for bit.

It is not fast (float32 matmuls on dequantized values): it exists so that the quality of fp8
attention can be measured where the kernel cannot run (CPU, tests, other GPUs). Key-padding
masks are applied as in ``fp8-cudnn``; other masked calls run exact SDPA, as they do there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from omni_attention_fp8.layout import is_key_padding_mask
from omni_attention_fp8.scales import (
    FP8_MAX,
    P_SCALE,
    center_keys,
    compute_scales,
    dequantize_output,
    quantize,
)
from omni_core import Availability

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: Score elements one query block may hold (float32): bounds the emulation's memory.
BLOCK_ELEMENTS = 1 << 25


def fp8_emulated(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """fp8 attention over ``[B, S, H, D]`` computed in torch. A key-padding mask (boolean
    ``[B, 1, 1, keys]``) is applied, as ``fp8-cudnn`` does; other masks use exact SDPA."""
    import torch

    from omni_core.runtime import sdpa

    if attn_mask is not None and not is_key_padding_mask(
        tuple(attn_mask.shape), attn_mask.dtype == torch.bool, q.shape[0], k.shape[1]
    ):
        return sdpa(q, k, v, attn_mask=attn_mask, scale=scale)
    dropped = None if attn_mask is None else ~attn_mask.reshape(-1, 1, 1, k.shape[1])

    attn_scale = q.shape[-1] ** -0.5 if scale is None else scale
    kc = center_keys(k)
    scales = compute_scales(q, kc, v)
    # [B, H, S, D] float32 copies of the fp8 values (what the tensor cores multiply)
    qf = quantize(q, scales.q).float().transpose(1, 2)
    kf = quantize(kc, scales.k).float().transpose(1, 2)
    vf = quantize(v, scales.v).float().transpose(1, 2)
    score_scale = scales.qk_descale.reshape(1, 1, 1, 1) * attn_scale
    batch, heads, queries, keys = qf.shape[0], qf.shape[1], qf.shape[2], kf.shape[2]
    block = max(1, BLOCK_ELEMENTS // max(1, batch * heads * keys))
    pieces = []
    for start in range(0, queries, block):
        s = torch.matmul(qf[:, :, start : start + block], kf.transpose(-1, -2)) * score_scale
        if dropped is not None:
            s = s.masked_fill(dropped, float("-inf"))
        p = torch.exp(s - s.amax(dim=-1, keepdim=True))  # in (0, 1], 1 at the row's max
        total = p.sum(dim=-1, keepdim=True)
        p8 = (p * P_SCALE).to(torch.float8_e4m3fn).float()
        pieces.append(torch.matmul(p8, vf) / (P_SCALE * total))
    out = torch.cat(pieces, dim=2).transpose(1, 2)  # [B, S, H, Dv], the scaled domain
    out8 = out.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return dequantize_output(out8, scales, q.dtype)


def fp8_emulated_available() -> Availability:
    """float8_e4m3fn casts are all it needs (torch >= 2.1)."""
    import torch

    if not hasattr(torch, "float8_e4m3fn"):
        return Availability.no("this torch has no float8_e4m3fn dtype (torch >= 2.1 needed)")
    return Availability.yes()


__all__ = ["BLOCK_ELEMENTS", "fp8_emulated", "fp8_emulated_available"]
