"""The Qwen3-TTS talker: a Qwen3 decoder stack over summed text + codec embeddings.

Module names follow the official checkpoint (``talker.model.layers.N...``, ``talker.model.norm``,
``talker.model.codec_embedding``, ``talker.model.text_embedding``, ``talker.text_projection``,
``talker.codec_head``, ``talker.code_predictor...``) so ``load_state_dict`` takes the official
``model.safetensors`` as it is.

The official talker uses a 3-section multimodal RoPE whose three position rows are always equal for
speech; with equal rows it is exactly the standard 1D RoPE, which is what runs here
(``Qwen3RotaryEmbedding`` over plain ``position_ids``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .blocks import layer_cache_kwarg
from .config import TalkerConfig, qwen3_stack_config


def additive_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A bool (True = attend) or additive 4D mask as an additive float mask of ``dtype``.

    Masked entries get the dtype's most negative finite value, not -inf, so a fully masked
    (padding) query row gives finite garbage instead of NaN.
    """
    if mask is None or mask.dtype != torch.bool:
        return mask if mask is None else mask.to(dtype)
    # a fill with a Python scalar: no host-to-device copy (so no sync) inside a decode loop
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill_(~mask, torch.finfo(dtype).min)


def causal_mask(
    query_len: int, key_len: int, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """[1, 1, S, K] additive mask: query i (at key position K - S + i) sees keys <= its own."""
    q = torch.arange(key_len - query_len, key_len, device=device)[:, None]
    k = torch.arange(key_len, device=device)[None, :]
    return additive_mask((k <= q)[None, None], dtype)


class DecoderStack(nn.Module):
    """``layers`` of ``Qwen3DecoderLayer`` + final ``norm`` + rotary embedding (no embeddings)."""

    def __init__(self, dims: Any, attn_implementation: str = "sdpa") -> None:
        super().__init__()
        from transformers.models.qwen3.modeling_qwen3 import (
            Qwen3DecoderLayer,
            Qwen3RMSNorm,
            Qwen3RotaryEmbedding,
        )

        self.config = qwen3_stack_config(dims, attn_implementation)
        self.layers = nn.ModuleList(
            Qwen3DecoderLayer(self.config, i) for i in range(self.config.num_hidden_layers)
        )
        self.norm = Qwen3RMSNorm(self.config.hidden_size, eps=self.config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(self.config)

    def reset_rotary(self) -> None:
        """Recompute the (non-persistent, float32) RoPE inverse frequencies on the weights'
        device."""
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

        device = self.norm.weight.device
        with torch.device(device):
            self.rotary_emb = Qwen3RotaryEmbedding(self.config)

    def forward(
        self,
        inputs_embeds: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        cache: Any = None,
    ) -> torch.Tensor:
        """[B, S, H] -> final-norm hidden states [B, S, H].

        ``attention_mask``: None (causal over the cache's keys + these S) or a 4D [B, 1, S, K] mask,
        bool (True = attend) or additive. ``cache``: a transformers ``Cache`` or None.
        """
        hidden = inputs_embeds
        seq = hidden.shape[1]
        mask = additive_mask(attention_mask, hidden.dtype)
        if mask is None and seq > 1:
            past = cache.get_seq_length() if cache is not None else 0
            mask = causal_mask(seq, past + seq, hidden.device, hidden.dtype)
        position_embeddings = self.rotary_emb(hidden, position_ids)
        cache_kwarg = {layer_cache_kwarg(): cache}
        for layer in self.layers:
            hidden = layer(
                hidden,
                attention_mask=mask,
                position_ids=position_ids,
                use_cache=cache is not None,
                position_embeddings=position_embeddings,
                **cache_kwarg,
            )
        return self.norm(hidden)


class TalkerModel(DecoderStack):
    """The stack plus the two input embedding tables (``talker.model.*``)."""

    def __init__(self, cfg: TalkerConfig, attn_implementation: str = "sdpa") -> None:
        super().__init__(cfg.dims, attn_implementation)
        self.codec_embedding = nn.Embedding(cfg.dims.vocab_size, cfg.dims.hidden_size)
        self.text_embedding = nn.Embedding(cfg.text_vocab_size, cfg.text_hidden_size)


class TextProjection(nn.Module):
    """Text hidden size -> talker hidden size: two biased linears with the talker's activation."""

    def __init__(self, in_size: int, mid_size: int, out_size: int, act: str) -> None:
        super().__init__()
        from transformers.activations import ACT2FN

        self.linear_fc1 = nn.Linear(in_size, mid_size, bias=True)
        self.linear_fc2 = nn.Linear(mid_size, out_size, bias=True)
        self.act_fn = ACT2FN[act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(self.act_fn(self.linear_fc1(x)))


class Talker(nn.Module):
    """``talker.*``: stack, text projection, codebook-0 head and the code predictor."""

    def __init__(self, cfg: TalkerConfig, attn_implementation: str = "sdpa") -> None:
        super().__init__()
        from .code_predictor import CodePredictor

        self.cfg = cfg
        self.model = TalkerModel(cfg, attn_implementation)
        self.text_projection = TextProjection(
            cfg.text_hidden_size, cfg.text_hidden_size, cfg.dims.hidden_size, cfg.dims.hidden_act
        )
        self.codec_head = nn.Linear(cfg.dims.hidden_size, cfg.dims.vocab_size, bias=False)
        self.code_predictor = CodePredictor(cfg, attn_implementation)

    def reset_rotary(self) -> None:
        self.model.reset_rotary()
        self.code_predictor.model.reset_rotary()

    def embed_text(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Text token ids [...] -> projected text embeddings [..., H]."""
        return self.text_projection(self.model.text_embedding(token_ids))

    def embed_codec(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Codebook-0 / control token ids [...] -> [..., H]."""
        return self.model.codec_embedding(token_ids)

    def forward(self, inputs_embeds, position_ids, attention_mask=None, cache=None):
        """The stack's arguments (:meth:`DecoderStack.forward`) -> (final-norm hidden [B, S, H],
        codebook-0 logits [B, S, V])."""
        hidden = self.model(inputs_embeds, position_ids, attention_mask, cache)
        return hidden, self.codec_head(hidden)

    def frame_embedding(self, codes: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """codes [B, G] (codebook 0 first) + text [B, H] -> the talker's next input [B, H]."""
        return self.sum_codebooks(codes) + text

    def sum_codebooks(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [N, G] -> the sum of their G codebook embeddings [N, H] (one stacked sum, as
        the official model adds them, so the float rounding is the same)."""
        tables = self.code_predictor.model.codec_embedding
        rows = [self.embed_codec(codes[:, 0])]
        rows += [table(codes[:, i + 1]) for i, table in enumerate(tables)]
        return torch.stack(rows, dim=1).sum(1)

    def suppressed_tokens(self) -> torch.Tensor:
        """Bool [V]: the control tokens codebook 0 may never emit (the last 1024 ids except EOS)."""
        vocab = self.cfg.dims.vocab_size
        mask = torch.zeros(vocab, dtype=torch.bool)
        mask[max(vocab - 1024, 0) :] = True
        mask[self.cfg.codec_eos_token_id] = False
        return mask
