"""``fp8-cudnn``: omni's ``[B, S, H, D]`` attention on cuDNN's fp8 flash attention (Hopper).

Per call: centre k, compute the per-(batch, head) scales and quantize q/k/v
(:mod:`omni_attention_fp8.scales`: torch ops, fused by ``torch.compile`` into the producers),
run the cached cuDNN graph (:mod:`omni_attention_fp8.cudnn_graph`) through the custom op
``omni_attention_fp8::sdpa_fp8`` (opaque to ``torch.compile``, so a compiled block has no graph
break and no host sync), and dequantize the fp8 output per head. A key-padding mask (Qwen-Image's
text padding when CFG is batched) runs on cuDNN's padding mask with each row's valid keys moved
first, which is exact; other masks and shapes cuDNN's kernel does not take
(:func:`~omni_attention_fp8.layout.unsupported_reason`) run exact SDPA; a shape cuDNN refuses
at build time runs the same fp8 inputs on torch SDPA, with one warning.
"""

from __future__ import annotations

import torch

from omni_attention_fp8.cudnn_graph import GRAPHS
from omni_attention_fp8.layout import graph_key, is_key_padding_mask, unsupported_reason
from omni_attention_fp8.scales import (
    FP8_MAX,
    center_keys,
    compute_scales,
    dequantize_output,
    quantize,
    valid_keys_first,
)
from omni_core.runtime import sdpa


@torch.library.custom_op("omni_attention_fp8::sdpa_fp8", mutates_args=())
def sdpa_fp8(
    q8: torch.Tensor,
    k8: torch.Tensor,
    v8: torch.Tensor,
    qk_descale: torch.Tensor,
    attn_scale: float,
    kv_lens: torch.Tensor | None = None,
) -> torch.Tensor:
    """fp8 ``[B, S, H, D]`` attention output in the scaled domain of :mod:`.scales`; with
    ``kv_lens`` (int32 ``[B, 1, 1, 1]``) each batch row attends to its first keys only."""
    key = graph_key(
        tuple(q8.shape),
        tuple(k8.shape),
        tuple(v8.shape),
        attn_scale,
        q8.device.index or 0,
        padded=kv_lens is not None,
    )
    graph, handle = GRAPHS.get(key, q8.device)
    if graph is None:
        return fp8_inputs_on_sdpa(q8, k8, v8, qk_descale, attn_scale, kv_lens)
    out8 = torch.empty(
        (key.batch, key.q_len, key.heads, key.value_dim),
        dtype=torch.float8_e4m3fn,
        device=q8.device,
    )
    graph.execute(handle, q8, k8, v8, qk_descale, out8, kv_lens)
    return out8


@sdpa_fp8.register_fake
def _sdpa_fp8_shape(
    q8: torch.Tensor,
    k8: torch.Tensor,
    v8: torch.Tensor,
    qk_descale: torch.Tensor,
    attn_scale: float,
    kv_lens: torch.Tensor | None = None,
) -> torch.Tensor:
    return q8.new_empty((q8.shape[0], q8.shape[1], q8.shape[2], v8.shape[3]))


def fp8_inputs_on_sdpa(
    q8: torch.Tensor,
    k8: torch.Tensor,
    v8: torch.Tensor,
    qk_descale: torch.Tensor,
    attn_scale: float,
    kv_lens: torch.Tensor | None = None,
) -> torch.Tensor:
    """What the kernel computes, from the same fp8 inputs, on torch SDPA (exact softmax, no fp8
    probabilities): for shapes cuDNN refuses to build."""
    q = q8.float() * (qk_descale.reshape(()) * attn_scale)
    mask = None
    if kv_lens is not None:
        keys = torch.arange(k8.shape[1], device=k8.device)
        mask = keys[None, None, None, :] < kv_lens.reshape(-1, 1, 1, 1)
    out = sdpa(q, k8.float(), v8.float(), attn_mask=mask, scale=1.0)
    return out.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).contiguous()


def fp8_cudnn(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """fp8 attention over ``[B, S, H, D]`` on cuDNN. A key-padding mask (boolean ``[B, 1, 1,
    keys]``) runs on cuDNN's padding mask; other masks and unsupported shapes: exact SDPA."""
    padding = attn_mask is not None and is_key_padding_mask(
        tuple(attn_mask.shape), attn_mask.dtype == torch.bool, q.shape[0], k.shape[1]
    )
    unsupported = unsupported_reason(q.shape, k.shape, v.shape) is not None
    if unsupported or (attn_mask is not None and not padding):
        return sdpa(q, k, v, attn_mask=attn_mask, scale=scale)
    attn_scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    kv_lens = None
    if attn_mask is not None:
        keep = attn_mask.reshape(attn_mask.shape[0], k.shape[1]).expand(q.shape[0], -1)
        k, v, kv_lens = valid_keys_first(keep, k, v)
    kc = center_keys(k)
    scales = compute_scales(q, kc, v)
    out8 = sdpa_fp8(
        quantize(q, scales.q),
        quantize(kc, scales.k),
        quantize(v, scales.v),
        scales.qk_descale,
        attn_scale,
        kv_lens,
    )
    return dequantize_output(out8, scales, q.dtype)


__all__ = ["fp8_cudnn", "fp8_inputs_on_sdpa", "sdpa_fp8"]
