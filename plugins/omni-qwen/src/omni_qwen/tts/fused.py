"""Qwen3 decoder layers in two fused halves, for the decode steps that run thousands of times.

A ``Qwen3DecoderLayer`` launches about 45 kernels per call (each RMSNorm is six, RoPE ten), and
Qwen3-TTS calls 28 talker layers plus 15 x 5 code-predictor layers per 80 ms frame: at the batch
sizes a speech server runs, even a replayed CUDA graph spends its time launching small kernels,
not reading weights. Here a layer is the same arithmetic in two pure functions of its weights:

- :func:`attention_inputs`: input RMSNorm, the q/k/v projections, the per-head q/k RMSNorm and
  RoPE -> ``(q, k, v)``;
- :func:`attention_output_and_mlp`: the output projection, the residual, the post-attention
  RMSNorm, the SiLU-gated MLP and its residual.

Between them the layer's own cache ``update`` and transformers' attention function run as they
do in the layer (any cache, any mask), so the halves hold no layer index and one compiled
artifact serves every layer of both stacks. :class:`FusedLayers` compiles the halves with
``torch.compile`` on CUDA (inductor fuses the norms, RoPE, the gate and the residual adds into a
few kernels; the weights stay inputs) and runs them eagerly elsewhere; eager, they compute
exactly what ``Qwen3DecoderLayer`` computes (tested on the CPU). Compiled, they are the same
math in fused kernels: float32 norms as in the layer, bf16 rounding at other places, so codes
can differ from the eager layers once two logits are nearly tied (measured and reported).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

log = logging.getLogger("omni.qwen.tts")

#: Compiled variants the halves may have: batch and length 1 or more (a compiled function
#: specialises on size 1) for each stack width; dynamo's default limit (8) is exactly that.
RECOMPILE_LIMIT = 32


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Qwen3RMSNorm: float32 statistics, the weight applied in the input's dtype
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def attention_inputs(
    x: torch.Tensor,
    norm: torch.Tensor,
    q_w: torch.Tensor,
    k_w: torch.Tensor,
    v_w: torch.Tensor,
    q_norm: torch.Tensor,
    k_norm: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    head_dim: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hidden ``[B, S, H]`` -> ``q [B, heads, S, D]``, ``k`` and ``v [B, kv_heads, S, D]``."""
    batch, seq = x.shape[0], x.shape[1]
    h = _rms(x, norm, eps)
    q = _rms(F.linear(h, q_w).view(batch, seq, -1, head_dim), q_norm, eps).transpose(1, 2)
    k = _rms(F.linear(h, k_w).view(batch, seq, -1, head_dim), k_norm, eps).transpose(1, 2)
    v = F.linear(h, v_w).view(batch, seq, -1, head_dim).transpose(1, 2)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v


def attention_output_and_mlp(
    x: torch.Tensor,
    attn: torch.Tensor,
    o_w: torch.Tensor,
    norm: torch.Tensor,
    gate_w: torch.Tensor,
    up_w: torch.Tensor,
    down_w: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    """Residual ``x [B, S, H]`` + attention output ``[B, S, heads, D]`` -> the layer's output."""
    x = x + F.linear(attn.reshape(x.shape[0], x.shape[1], -1).contiguous(), o_w)
    h = _rms(x, norm, eps)
    return x + F.linear(F.silu(F.linear(h, gate_w)) * F.linear(h, up_w), down_w)


def _canonical(t: torch.Tensor) -> torch.Tensor:
    """``t`` with the strides a fresh tensor of its shape has (a copy only when it has not):
    a compiled function guards on input strides, and a size-1 dimension after a transpose or
    an attention kernel can carry any stride, which would recompile it for each layout."""
    expected, step = [], 1
    for size in reversed(t.shape):
        expected.append(step)
        step *= max(int(size), 1)
    if tuple(reversed(expected)) == t.stride():
        return t
    return t.clone(memory_format=torch.contiguous_format)


def fusable(layer: nn.Module) -> str | None:
    """Why ``layer`` (a ``Qwen3DecoderLayer``) cannot take the fused path, or None."""
    attn, mlp = layer.self_attn, layer.mlp
    config = attn.config
    if any(m.bias is not None for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj)):
        return "attention projections with biases"
    if any(m.bias is not None for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj)):
        return "MLP projections with biases"
    if config.hidden_act != "silu":
        return f"activation {config.hidden_act!r}"
    if attn.sliding_window is not None:
        return "sliding-window attention"
    return None


class FusedLayers:
    """Runs a stack's ``Qwen3DecoderLayer`` s as the two halves (module doc).

    ``compile``: ``torch.compile`` the halves (CUDA only; elsewhere they run eagerly).
    """

    def __init__(self, layers: nn.ModuleList, *, compile: bool) -> None:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        self.layers = layers
        first = layers[0].self_attn
        self.attention = ALL_ATTENTION_FUNCTIONS[first.config._attn_implementation]
        self.eps = float(layers[0].input_layernorm.variance_epsilon)
        self.head_dim = int(first.head_dim)
        self.compiled = compile
        #: Why the compiled halves were given up (they then run eagerly), or None.
        self.reason: str | None = None
        if compile:
            self._inputs = torch.compile(attention_inputs, dynamic=True, fullgraph=True)
            self._outputs = torch.compile(attention_output_and_mlp, dynamic=True, fullgraph=True)

    def inputs(self, *args: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.compiled:
            try:
                with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
                    return self._inputs(*args)
            except Exception as exc:  # noqa: BLE001 (a compiler failure must not fail a request)
                self._give_up(exc)
        return attention_inputs(*args)

    def outputs(self, *args: Any) -> torch.Tensor:
        if self.compiled:
            try:
                with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
                    return self._outputs(*args)
            except Exception as exc:  # noqa: BLE001 (as above)
                self._give_up(exc)
        return attention_output_and_mlp(*args)

    def _give_up(self, exc: Exception) -> None:
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise exc  # the graph runner falls back, then this runs again outside the capture
        self.compiled = False
        self.reason = f"{type(exc).__name__}: {exc}"[:300]
        log.warning("qwen3-tts: compiled decoder layers off, the halves run eagerly: %s", exc)

    def __call__(
        self,
        hidden: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor | None,
        cache: Any,
    ) -> torch.Tensor:
        cos, sin = (_canonical(t) for t in position_embeddings)
        hidden = _canonical(hidden)
        for layer in self.layers:
            attn, mlp = layer.self_attn, layer.mlp
            q, k, v = self.inputs(
                hidden,
                layer.input_layernorm.weight,
                attn.q_proj.weight,
                attn.k_proj.weight,
                attn.v_proj.weight,
                attn.q_norm.weight,
                attn.k_norm.weight,
                cos,
                sin,
                self.head_dim,
                self.eps,
            )
            if cache is not None:
                k, v = cache.update(k, v, attn.layer_idx)
            out, _ = self.attention(attn, q, k, v, mask, dropout=0.0, scaling=attn.scaling)
            hidden = self.outputs(
                hidden,
                _canonical(out),
                attn.o_proj.weight,
                layer.post_attention_layernorm.weight,
                mlp.gate_proj.weight,
                mlp.up_proj.weight,
                mlp.down_proj.weight,
                self.eps,
            )
        return hidden

    def warm(self, rows: tuple[int, ...] = (1, 2), lengths: tuple[int, ...] = (1, 2)) -> float:
        """Compile every shape class the steps will meet (batch and length 1 or more: a
        compiled function specialises on size 1) on throwaway inputs, so no request waits
        for a compile; -> seconds taken (0 when not compiled)."""
        if not self.compiled:
            return 0.0
        started = time.perf_counter()
        layer = self.layers[0]
        attn = layer.self_attn
        weight = layer.input_layernorm.weight
        heads = attn.q_proj.weight.shape[0] // self.head_dim
        with torch.inference_mode():
            for batch in rows:
                for seq in lengths:
                    x = torch.zeros(
                        (batch, seq, weight.shape[0]), dtype=weight.dtype, device=weight.device
                    )
                    cos = torch.ones(
                        (batch, seq, self.head_dim), dtype=weight.dtype, device=weight.device
                    )
                    q, _, _ = self.inputs(
                        x, weight, attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight,
                        attn.q_norm.weight, attn.k_norm.weight, cos, cos * 0, self.head_dim,
                        self.eps,
                    )  # fmt: skip
                    out = q.transpose(1, 2).reshape(batch, seq, heads, self.head_dim)
                    self.outputs(
                        x, out, attn.o_proj.weight, layer.post_attention_layernorm.weight,
                        layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight,
                        layer.mlp.down_proj.weight, self.eps,
                    )  # fmt: skip
        took = time.perf_counter() - started
        log.info("qwen3-tts: compiled the fused decoder layers in %.1f s", took)
        return took


def use_fused_layers(model: Any, mode: str) -> dict[str, Any]:
    """Apply the ``fused_layers`` load option to both stacks of ``model`` (a
    :class:`.model.Qwen3TTSModel`): ``compiled`` compiles the halves on CUDA (here, at load
    time, not in a request), ``eager`` runs them uncompiled, ``off`` keeps the layers. -> what
    runs, for the decode report."""
    stacks = (model.talker.model, model.talker.code_predictor.model)
    if mode == "off":
        for stack in stacks:
            stack.fused = None
        return {"mode": mode, "path": "layers", "reason": None, "compile_s": 0.0}
    compile = mode == "compiled" and model.device.type == "cuda"
    for stack in stacks:
        reason = stack.use_fused(compile=compile)
        if reason is not None:
            for other in stacks:
                other.fused = None
            log.warning("qwen3-tts: fused decoder layers off: %s", reason)
            return {"mode": mode, "path": "layers", "reason": reason, "compile_s": 0.0}
    took = sum(stack.fused.warm() for stack in stacks)
    reasons = [stack.fused.reason for stack in stacks if stack.fused.reason]
    compiled = compile and not reasons
    path = "fused (compiled)" if compiled else "fused (eager)"
    reason = reasons[0] if reasons else None
    return {"mode": mode, "path": path, "reason": reason, "compile_s": round(took, 2)}
