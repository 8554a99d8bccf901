"""A fixed-size KV store and CUDA graphs for the code predictor's per-frame loop (opt-in).

The inner loop (2 prefill positions, then 14 one-token steps, each a 5-layer stack) is short and
launch-bound: on a GPU most of a frame's time is kernel launches and Python. With a KV store of
fixed addresses (:class:`StaticFrameCache`) the whole loop can be captured once per batch size
and replayed (:class:`CodePredictorGraphs`, greedy codebooks 1..15). Rows never attend to each
other, so a batch is padded up to the nearest captured size. Off unless a caller turns it on
(``Qwen3TTSModel.enable_code_predictor_graphs``); on CPU the loop runs eagerly as always.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

BUCKETS = (1, 2, 4, 8, 16, 32, 64)


class StaticFrameCache:
    """The transformers ``Cache`` calls a decoder stack makes (``update``, ``get_seq_length``)
    on preallocated ``[B, kv_heads, length, head_dim]`` tensors, one pair per layer. Each
    forward writes its positions after those already held, in every layer, then advances;
    :meth:`reset` starts the next frame."""

    def __init__(
        self, layers: int, batch: int, kv_heads: int, head_dim: int, length: int, dtype, device
    ):
        shape = (batch, kv_heads, length, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.start = 0

    def reset(self) -> None:
        self.start = 0

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.start

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        *args: Any,
        **kwargs: Any,
    ):
        end = self.start + key_states.shape[-2]
        self.keys[layer_idx][:, :, self.start : end] = key_states
        self.values[layer_idx][:, :, self.start : end] = value_states
        keys, values = self.keys[layer_idx][:, :, :end], self.values[layer_idx][:, :, :end]
        if layer_idx == len(self.keys) - 1:
            self.start = end
        return keys, values

    @classmethod
    def for_predictor(cls, predictor: Any, batch: int, dtype, device) -> StaticFrameCache:
        config = predictor.model.config
        return cls(
            config.num_hidden_layers,
            batch,
            config.num_key_value_heads,
            config.head_dim,
            predictor.num_groups,  # 2 prefill positions + num_groups - 2 steps
            dtype,
            device,
        )


@dataclass
class _Captured:
    graph: Any
    hidden: torch.Tensor
    code0: torch.Tensor
    codes: torch.Tensor


class CodePredictorGraphs:
    """Greedy codebooks 1..15 by replaying one captured loop per batch-size bucket (CUDA only)."""

    def __init__(self, model: Any, buckets: tuple[int, ...] = BUCKETS) -> None:
        self.model = model
        self.buckets = tuple(sorted(buckets))
        self.captured: dict[int, _Captured] = {}  # each graph has its own memory pool

    @torch.inference_mode()
    def __call__(self, hidden: torch.Tensor, code0: torch.Tensor) -> torch.Tensor | None:
        """-> codes [B, G] (code0 first), or None when B is above every bucket."""
        batch = hidden.shape[0]
        bucket = next((b for b in self.buckets if b >= batch), None)
        if bucket is None:
            return None
        captured = self.captured.get(bucket) or self._capture(bucket, hidden)
        captured.hidden[:batch].copy_(hidden)
        captured.code0[:batch].copy_(code0)
        captured.graph.replay()
        return captured.codes[:batch].clone()

    def _run(
        self, hidden: torch.Tensor, code0: torch.Tensor, cache: StaticFrameCache
    ) -> torch.Tensor:
        cache.reset()
        predictor = self.model.talker.code_predictor
        rest = predictor.predict(hidden, self.model.talker.embed_codec(code0), None, cache)
        return torch.cat([code0[:, None], rest], dim=1)

    def _capture(self, bucket: int, like: torch.Tensor) -> _Captured:
        predictor = self.model.talker.code_predictor
        hidden = torch.zeros((bucket, like.shape[1]), dtype=like.dtype, device=like.device)
        code0 = torch.zeros(bucket, dtype=torch.long, device=like.device)
        cache = StaticFrameCache.for_predictor(predictor, bucket, like.dtype, like.device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the graph, as CUDA graphs require
            for _ in range(2):
                self._run(hidden, code0, cache)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            codes = self._run(hidden, code0, cache)
        self.captured[bucket] = _Captured(graph, hidden, code0, codes)
        return self.captured[bucket]
