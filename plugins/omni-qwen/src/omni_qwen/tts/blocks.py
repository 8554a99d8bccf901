"""The transformers building blocks Qwen3-TTS uses, across the transformers 5 releases supported.

:class:`DecoderStack` (Qwen3 decoder layers, final norm, rotary embedding) is the body of both the
talker and the code predictor; :func:`additive_mask` / :func:`causal_mask` are the attention masks
they and the codec's windowed transformer take.

Two things moved inside 5.x: decoder layers took their KV cache as ``past_key_values`` and now
take it as ``cache``; Mimi was a flat ``MimiModel`` (``encoder``, ``encoder_transformer``,
``downsample``, ``quantizer``, as the official speech-tokenizer file stores it) and is now split
into ``MimiEncoderModel`` + ``MimiSplitResidualVectorQuantizer``. This module hides both.
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any

import torch
from torch import nn

from .config import qwen3_stack_config


@cache
def layer_cache_kwarg() -> str:
    """The keyword ``Qwen3DecoderLayer.forward`` takes the KV cache by."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer

    params = inspect.signature(Qwen3DecoderLayer.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def split_mimi() -> bool:
    """True when transformers has the split Mimi encoder (``MimiEncoderModel``)."""
    from transformers.models.mimi import modeling_mimi

    return hasattr(modeling_mimi, "MimiEncoderModel")


def mimi_config(raw: dict[str, Any], attn_implementation: str) -> Any:
    from transformers.models.mimi import configuration_mimi

    fields = {
        k: v
        for k, v in raw.items()
        if k not in ("architectures", "transformers_version", "torch_dtype", "dtype")
    }
    cls = getattr(configuration_mimi, "MimiEncoderConfig", None) or configuration_mimi.MimiConfig
    config = cls(**fields)
    config._attn_implementation = attn_implementation
    return config


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
        #: The layers as fused halves (:meth:`use_fused`), or None: the layers themselves.
        self.fused: Any = None

    def use_fused(self, *, compile: bool) -> str | None:
        """Run the layers as :class:`.fused.FusedLayers` from now on (``compile``: with
        ``torch.compile``); -> why not (the layers then stay as they are), or None."""
        from .fused import FusedLayers, fusable

        for layer in self.layers:
            reason = fusable(layer)
            if reason is not None:
                return reason
        self.fused = FusedLayers(self.layers, compile=compile)
        return None

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
        if self.fused is not None:
            return self.norm(self.fused(hidden, position_embeddings, mask, cache))
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


_SPLIT = (
    ("encoder.layers.", "encoder.encoder_seanet.layers."),
    ("encoder_transformer.", "encoder.encoder_transformer."),
    ("downsample.", "encoder.downsample."),
)


def mimi_module_keys(key: str) -> str:
    """An official (flat Mimi) key, relative to the encoder -> :class:`MimiEncoder`'s."""
    return _rename(key, _SPLIT) if split_mimi() else f"model.{key}"


def mimi_official_keys(key: str) -> str:
    """:class:`MimiEncoder`'s key -> the official (flat Mimi) layout's, relative to the encoder."""
    if split_mimi():
        return _rename(key, tuple((b, a) for a, b in _SPLIT))
    return key[len("model.") :] if key.startswith("model.") else key


class MimiEncoder(nn.Module):
    """Mimi's encoder half and its quantizer: waveform [B, 1, N] -> codes [n_q, B, frames].

    With the split Mimi the parameters live in ``encoder`` (a ``MimiEncoderModel``) and
    ``quantizer``; with the flat one in ``model`` (a ``MimiModel`` without its decoder half), whose
    keys are the official file's own (see :func:`mimi_module_keys`).
    """

    def __init__(self, raw: dict[str, Any], attn_implementation: str = "sdpa") -> None:
        super().__init__()
        from transformers.models.mimi import modeling_mimi

        config = mimi_config(raw, attn_implementation)
        self.split = split_mimi()
        if self.split:
            self.encoder = modeling_mimi.MimiEncoderModel(config)
            self.quantizer = modeling_mimi.MimiSplitResidualVectorQuantizer(config)
        else:
            self.model = modeling_mimi.MimiModel(config)
            self.model.decoder = self.model.decoder_transformer = self.model.upsample = None

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        if self.split:
            return self.quantizer.encode(self.encoder(wav).latents, None)
        return self.model.encode(wav, return_dict=True).audio_codes.transpose(0, 1)


def _rename(key: str, pairs: tuple[tuple[str, str], ...]) -> str:
    for old, new in pairs:
        if key.startswith(old):
            return new + key[len(old) :]
    return key
