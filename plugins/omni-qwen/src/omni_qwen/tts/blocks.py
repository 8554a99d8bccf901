"""The transformers building blocks Qwen3-TTS uses, across the transformers 5 releases supported.

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
