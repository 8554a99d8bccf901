"""Qwen3-TTS configuration: the official ``config.json`` field names, read into plain dataclasses.

``Qwen3TTSConfig.from_dict(json.load(...))`` reads the top-level ``config.json`` (``talker_config``
with its ``code_predictor_config``, ``speaker_encoder_config``); ``SpeechTokenizerConfig`` reads
``speech_tokenizer/config.json`` (``encoder_config`` is a Mimi config, ``decoder_config`` the 12 Hz
decoder's). The ``*_stack_config`` helpers turn them into the transformers configs whose decoder
layers the modules reuse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KINDS = ("custom_voice", "voice_design", "base")


def _known(cls: type, raw: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """The fields of dataclass ``cls`` that ``raw`` sets (the rest keep their defaults)."""
    values = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw and raw[k] is not None}
    return {**values, **overrides}


@dataclass
class TransformerDims:
    """What a Qwen3 decoder stack needs (talker, code predictor)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 32768
    attention_bias: bool = False

    @classmethod
    def from_dict(cls, raw: dict[str, Any], **defaults: Any) -> TransformerDims:
        values = {**defaults, **_known(cls, raw)}
        if "head_dim" not in values:
            values["head_dim"] = values["hidden_size"] // values["num_attention_heads"]
        return cls(**values)


@dataclass
class TalkerConfig:
    dims: TransformerDims
    code_predictor: TransformerDims
    num_code_groups: int = 32
    text_hidden_size: int = 2048
    text_vocab_size: int = 151936
    codec_eos_token_id: int = 4198
    codec_think_id: int = 4202
    codec_nothink_id: int = 4203
    codec_think_bos_id: int = 4204
    codec_think_eos_id: int = 4205
    codec_pad_id: int = 4196
    codec_bos_id: int = 4197
    spk_id: dict[str, Any] = field(default_factory=dict)
    spk_is_dialect: dict[str, Any] = field(default_factory=dict)
    codec_language_id: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TalkerConfig:
        for name, part in (
            ("talker_config", raw),
            ("code_predictor_config", raw.get("code_predictor_config") or {}),
        ):
            if part.get("use_sliding_window"):
                raise ValueError(f"config.json: {name}.use_sliding_window is not supported")
        dims = TransformerDims.from_dict(
            raw,
            vocab_size=3072,
            hidden_size=1024,
            intermediate_size=2048,
            num_hidden_layers=20,
            num_attention_heads=16,
            num_key_value_heads=2,
        )
        cp = TransformerDims.from_dict(
            raw.get("code_predictor_config") or {},
            vocab_size=2048,
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=5,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
        )
        return cls(**_known(cls, raw, dims=dims, code_predictor=cp))


@dataclass
class SpeakerEncoderConfig:
    """ECAPA-TDNN x-vector encoder over a 128-bin log-mel spectrogram (24 kHz)."""

    mel_dim: int = 128
    enc_dim: int = 1024
    enc_channels: list[int] = field(default_factory=lambda: [512, 512, 512, 512, 1536])
    enc_kernel_sizes: list[int] = field(default_factory=lambda: [5, 3, 3, 3, 1])
    enc_dilations: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 1])
    enc_attention_channels: int = 128
    enc_res2net_scale: int = 8
    enc_se_channels: int = 128
    sample_rate: int = 24000

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SpeakerEncoderConfig:
        return cls(**_known(cls, raw))


@dataclass
class Qwen3TTSConfig:
    talker: TalkerConfig
    speaker_encoder: SpeakerEncoderConfig
    kind: str
    model_size: str
    tokenizer_type: str
    im_start_token_id: int = 151644
    im_end_token_id: int = 151645
    tts_pad_token_id: int = 151671
    tts_bos_token_id: int = 151672
    tts_eos_token_id: int = 151673

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Qwen3TTSConfig:
        kind = raw.get("tts_model_type")
        if kind not in KINDS:
            raise ValueError(
                f"config.json: tts_model_type {kind!r} is not one of {', '.join(KINDS)}"
            )
        return cls(
            **_known(
                cls,
                raw,
                talker=TalkerConfig.from_dict(raw.get("talker_config") or {}),
                speaker_encoder=SpeakerEncoderConfig.from_dict(
                    raw.get("speaker_encoder_config") or {}
                ),
                kind=kind,
                model_size=str(raw.get("tts_model_size") or ""),
                tokenizer_type=str(raw.get("tokenizer_type") or ""),
            )
        )


@dataclass
class CodecDecoderConfig:
    """The 12 Hz decoder: RVQ dequantizer, a sliding-window transformer, a causal conv vocoder."""

    codebook_size: int = 2048
    codebook_dim: int = 512
    hidden_size: int = 1024
    latent_dim: int = 1024
    max_position_embeddings: int = 8000
    rope_theta: float = 10000.0
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    head_dim: int | None = None
    attention_bias: bool = False
    sliding_window: int = 72
    intermediate_size: int = 3072
    hidden_act: str = "silu"
    layer_scale_initial_scale: float = 0.01
    rms_norm_eps: float = 1e-5
    num_hidden_layers: int = 8
    num_quantizers: int = 16
    upsample_rates: list[int] = field(default_factory=lambda: [8, 5, 4, 3])
    upsampling_ratios: list[int] = field(default_factory=lambda: [2, 2])
    decoder_dim: int = 1536

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CodecDecoderConfig:
        values = _known(cls, raw)
        for key in ("upsample_rates", "upsampling_ratios"):
            if key in values:
                values[key] = list(values[key])
        return cls(**values)

    @property
    def total_upsample(self) -> int:
        out = 1
        for r in [*self.upsample_rates, *self.upsampling_ratios]:
            out *= int(r)
        return out


@dataclass
class SpeechTokenizerConfig:
    encoder: dict[str, Any] | None
    decoder: CodecDecoderConfig
    encoder_valid_num_quantizers: int = 16
    input_sample_rate: int = 24000
    output_sample_rate: int = 24000
    decode_upsample_rate: int = 1920
    encode_downsample_rate: int = 1920

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SpeechTokenizerConfig:
        kind = raw.get("model_type")
        if kind != "qwen3_tts_tokenizer_12hz":
            raise ValueError(
                f"speech_tokenizer/config.json: model_type {kind!r} is not "
                "qwen3_tts_tokenizer_12hz "
                "(only the 12 Hz tokenizer is supported)"
            )
        decoder = CodecDecoderConfig.from_dict(raw.get("decoder_config") or {})
        return cls(**_known(cls, raw, encoder=raw.get("encoder_config"), decoder=decoder))


def qwen3_stack_config(dims: TransformerDims, attn_implementation: str = "sdpa") -> Any:
    """A transformers ``Qwen3Config`` for a stack of ``Qwen3DecoderLayer`` with these dims."""
    from transformers import Qwen3Config

    config = Qwen3Config(
        vocab_size=dims.vocab_size,
        hidden_size=dims.hidden_size,
        intermediate_size=dims.intermediate_size,
        num_hidden_layers=dims.num_hidden_layers,
        num_attention_heads=dims.num_attention_heads,
        num_key_value_heads=dims.num_key_value_heads,
        head_dim=dims.head_dim,
        hidden_act=dims.hidden_act,
        rms_norm_eps=dims.rms_norm_eps,
        max_position_embeddings=dims.max_position_embeddings,
        attention_bias=dims.attention_bias,
        rope_parameters={"rope_type": "default", "rope_theta": float(dims.rope_theta)},
    )
    config._attn_implementation = attn_implementation
    return config


def codec_stack_config(cfg: CodecDecoderConfig, attn_implementation: str = "sdpa") -> Any:
    """A transformers ``LlamaConfig`` for the codec decoder's attention/MLP (no q/k norm)."""
    from transformers import LlamaConfig

    config = LlamaConfig(
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim or cfg.hidden_size // cfg.num_attention_heads,
        hidden_act=cfg.hidden_act,
        rms_norm_eps=cfg.rms_norm_eps,
        max_position_embeddings=cfg.max_position_embeddings,
        attention_bias=cfg.attention_bias,
        mlp_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": float(cfg.rope_theta)},
    )
    config._attn_implementation = attn_implementation
    config.layer_scale_initial_scale = cfg.layer_scale_initial_scale
    return config
