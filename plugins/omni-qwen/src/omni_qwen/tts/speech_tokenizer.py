"""The 12 Hz speech tokenizer (``speech_tokenizer/``): Mimi encoder + the 12 Hz decoder.

The encoder is transformers' own Mimi (:class:`.blocks.MimiEncoder`, built from the
``encoder_config`` Mimi dict); the official file stores it in Mimi's original flat layout under
``encoder.`` (``encoder.encoder.layers``, ``encoder.encoder_transformer``, ``encoder.downsample``,
``encoder.quantizer``), which :func:`to_module_keys` maps. Of the 32 Mimi codebooks the first
``encoder_valid_num_quantizers`` (16) are the model's.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .codec import CodecDecoder
from .config import SpeechTokenizerConfig


def to_module_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Official speech-tokenizer keys -> this module's."""
    from .blocks import mimi_module_keys

    return {
        (f"encoder.{mimi_module_keys(k[8:])}" if k.startswith("encoder.") else k): v
        for k, v in state.items()
    }


def to_official_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """This module's keys -> the official layout (what the tiny builder saves)."""
    from .blocks import mimi_official_keys

    return {
        (f"encoder.{mimi_official_keys(k[8:])}" if k.startswith("encoder.") else k): v
        for k, v in state.items()
    }


class SpeechTokenizer(nn.Module):
    def __init__(self, cfg: SpeechTokenizerConfig, attn_implementation: str = "sdpa") -> None:
        super().__init__()
        self.cfg = cfg
        self.decoder = CodecDecoder(cfg.decoder, attn_implementation)
        self.samples_per_frame = cfg.decode_upsample_rate
        self.sample_rate = cfg.output_sample_rate
        self.encoder: nn.Module | None = None
        if cfg.encoder is not None:
            from .blocks import MimiEncoder

            self.encoder = MimiEncoder(cfg.encoder, attn_implementation)

    # -- decoding ---------------------------------------------------------------------------
    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, Q, T] (or [Q, T]) -> wav [B, T * samples_per_frame] (or [N]), as the official
        tokenizer decodes a whole utterance (300-frame chunks with 25 frames of left context)."""
        single = codes.dim() == 2
        codes = codes[None] if single else codes
        wav = self.decoder.chunked(codes.clamp(min=0))[:, 0]
        return wav[0] if single else wav

    @torch.inference_mode()
    def decode_chunk(self, codes: torch.Tensor, context: int) -> torch.Tensor:
        """codes [B, Q, C + T] whose first ``context`` (C) frames were decoded before ->
        the samples of the T new frames [B, T * samples_per_frame]."""
        wav = self.decoder(codes.clamp(min=0))[:, 0]
        return wav[:, context * self.samples_per_frame :]

    # -- encoding ---------------------------------------------------------------------------
    @torch.inference_mode()
    def encode(self, wav: torch.Tensor, sr: int) -> torch.Tensor:
        """Mono waveform [N] at ``sr`` (resampled to the input rate) -> codes
        [Q, ceil(N' / 1920)]."""
        if self.encoder is None:
            raise ValueError("this speech tokenizer has no encoder (speech_tokenizer/config.json)")
        from .audio import to_rate

        param = next(self.encoder.parameters())
        wav = to_rate(wav, sr, self.cfg.input_sample_rate)
        codes = self.encoder(
            wav[None, None].to(device=param.device, dtype=param.dtype)
        )  # [n_q, B, frames]
        frames = math.ceil(wav.shape[-1] / self.cfg.encode_downsample_rate)
        return codes[: self.cfg.encoder_valid_num_quantizers, 0, :frames]
