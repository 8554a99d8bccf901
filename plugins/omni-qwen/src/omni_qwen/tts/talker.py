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

import torch
from torch import nn

from .blocks import DecoderStack
from .code_predictor import CodePredictor
from .config import TalkerConfig


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
