"""The code predictor: a small Qwen3 stack that fills codebooks 1..G-1 of one frame.

Per frame it reads two inputs, the talker's final hidden state and the codebook-0 embedding, then
predicts code 1, embeds it, predicts code 2, ... (G-1 sequential steps, its own short KV cache of at
most G+1 positions). Everything is batched over frames: B frames of B different requests run the
inner loop together. Official key names: ``talker.code_predictor.model.layers.N...``,
``.model.norm``, ``.model.codec_embedding.{i}`` (the embedding of code i+1, in the talker's hidden
size), ``.lm_head.{i}`` (predicts code i+1), ``.small_to_mtp_projection`` (talker -> predictor
width, present only when they differ).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .blocks import DecoderStack
from .config import TalkerConfig

Sampler = Callable[[torch.Tensor, int], torch.Tensor]


def greedy(logits: torch.Tensor, group: int) -> torch.Tensor:
    """The default sampler: argmax over the last dim."""
    return logits.argmax(dim=-1)


class CodePredictorModel(DecoderStack):
    def __init__(self, cfg: TalkerConfig, attn_implementation: str = "sdpa") -> None:
        super().__init__(cfg.code_predictor, attn_implementation)
        self.codec_embedding = nn.ModuleList(
            nn.Embedding(cfg.code_predictor.vocab_size, cfg.dims.hidden_size)
            for _ in range(cfg.num_code_groups - 1)
        )


class CodePredictor(nn.Module):
    def __init__(self, cfg: TalkerConfig, attn_implementation: str = "sdpa") -> None:
        super().__init__()
        self.num_groups = cfg.num_code_groups
        self.model = CodePredictorModel(cfg, attn_implementation)
        self.lm_head = nn.ModuleList(
            nn.Linear(cfg.code_predictor.hidden_size, cfg.code_predictor.vocab_size, bias=False)
            for _ in range(cfg.num_code_groups - 1)
        )
        if cfg.code_predictor.hidden_size != cfg.dims.hidden_size:
            self.small_to_mtp_projection: nn.Module = nn.Linear(
                cfg.dims.hidden_size, cfg.code_predictor.hidden_size, bias=True
            )
        else:
            self.small_to_mtp_projection = nn.Identity()

    def step(
        self,
        inputs_embeds: torch.Tensor,
        start: int,
        group: int,
        cache: Any,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One inner step: talker-width inputs [B, S, H] at positions start.. -> logits of code
        ``group`` (1..G-1) at the last position [B, vocab]."""
        x = self.small_to_mtp_projection(inputs_embeds)
        batch, seq = x.shape[:2]
        positions = torch.arange(start, start + seq, device=x.device).expand(batch, seq)
        hidden = self.model(x, positions, attention_mask, cache)
        return self.lm_head[group - 1](hidden[:, -1])

    def predict(
        self,
        talker_hidden: torch.Tensor,
        code0_embedding: torch.Tensor,
        sampler: Sampler | None = None,
        cache: Any = None,
    ) -> torch.Tensor:
        """talker hidden [B, H] + codebook-0 embedding [B, H] -> codes 1..G-1 [B, G-1] long.

        ``cache``: an empty transformers ``Cache`` to reuse (a fresh ``DynamicCache`` if None).
        """
        from transformers.cache_utils import DynamicCache

        pick = sampler or greedy
        cache = DynamicCache() if cache is None else cache
        inputs = torch.stack([talker_hidden, code0_embedding], dim=1)
        codes = []
        position = 0
        for group in range(1, self.num_groups):
            logits = self.step(inputs, position, group, cache)
            position += inputs.shape[1]
            code = pick(logits, group)
            codes.append(code)
            if group < self.num_groups - 1:
                inputs = self.model.codec_embedding[group - 1](code)[:, None]
        return torch.stack(codes, dim=1)
