"""Tiny random Qwen3-TTS checkpoints in the official layout, built in-process (no network).

:func:`build_tiny_qwen3_tts` (``path, kind``) writes what ``Qwen/Qwen3-TTS-12Hz-*`` repos hold:
``config.json`` (real field names), ``generation_config.json``, ``model.safetensors`` (real key
names), ``vocab.json`` / ``merges.txt`` / ``tokenizer_config.json`` (a byte-level BPE Qwen2
tokenizer with the chat and TTS special tokens, made here), and ``speech_tokenizer/``
(``config.json`` with a Mimi ``encoder_config``, ``preprocessor_config.json``,
``model.safetensors`` in Mimi's flat key layout). The sizes are tiny but keep the real structure:
16 codebooks, 1024 control ids above the audio codes, a code predictor narrower than the talker,
a 128-bin ECAPA speaker encoder for Base.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .bpe import write_tiny_tokenizer

CODEBOOK = 64
TALKER_VOCAB = CODEBOOK + 1024
SPEAKERS = {"aiden": 1000, "serena": 1001, "uncle_fu": 1002}
DIALECTS = {"aiden": False, "serena": False, "uncle_fu": "beijing_dialect"}
LANGUAGES = {"english": 120, "chinese": 121, "german": 122, "beijing_dialect": 123}
WORDS = ("assistant", "user", "hello", "world")
SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
)


def write_tokenizer(folder: Path) -> dict[str, int]:
    """The tiny Qwen3-TTS tokenizer files (:data:`WORDS`, :data:`SPECIALS`); returns the special
    tokens' ids."""
    return write_tiny_tokenizer(folder, WORDS, SPECIALS)


def tiny_configs(
    kind: str, size: str, tokens: dict[str, int]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config.json, speech_tokenizer/config.json) for a tiny model of ``kind``."""
    code_predictor = {
        "vocab_size": CODEBOOK,
        "hidden_size": 24,
        "intermediate_size": 48,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 12,
        "hidden_act": "silu",
        "max_position_embeddings": 64,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000,
        "num_code_groups": 16,
        "use_sliding_window": False,
    }
    talker = {
        "vocab_size": TALKER_VOCAB,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000,
        "rope_scaling": {"rope_type": "default", "mrope_section": [2, 1, 1], "interleaved": True},
        "use_sliding_window": False,
        "num_code_groups": 16,
        "text_hidden_size": 48,
        "text_vocab_size": 512,
        "codec_pad_id": 100,
        "codec_bos_id": 101,
        "codec_eos_token_id": 102,
        "codec_think_id": 106,
        "codec_nothink_id": 107,
        "codec_think_bos_id": 108,
        "codec_think_eos_id": 109,
        "codec_language_id": dict(LANGUAGES),
        "spk_id": dict(SPEAKERS) if kind == "custom_voice" else {},
        "spk_is_dialect": dict(DIALECTS) if kind == "custom_voice" else {},
        "code_predictor_config": code_predictor,
    }
    speaker = {
        "mel_dim": 128,
        "enc_dim": 32,
        "enc_channels": [16, 16, 16, 16, 48],
        "enc_kernel_sizes": [5, 3, 3, 3, 1],
        "enc_dilations": [1, 2, 3, 4, 1],
        "enc_attention_channels": 8,
        "enc_res2net_scale": 4,
        "enc_se_channels": 8,
        "sample_rate": 24000,
    }
    config = {
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "model_type": "qwen3_tts",
        "tts_model_type": kind,
        "tts_model_size": size,
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "im_start_token_id": tokens["<|im_start|>"],
        "im_end_token_id": tokens["<|im_end|>"],
        "tts_pad_token_id": tokens["<tts_pad>"],
        "tts_bos_token_id": tokens["<tts_text_bos>"],
        "tts_eos_token_id": tokens["<tts_text_eod>"],
        "talker_config": talker,
        "speaker_encoder_config": speaker,
    }
    mimi = {
        "model_type": "mimi",
        "sampling_rate": 24000,
        "frame_rate": 12.5,
        "audio_channels": 1,
        "hidden_size": 16,
        "num_filters": 4,
        "num_residual_layers": 1,
        "upsampling_ratios": [8, 6, 5, 4],
        "kernel_size": 7,
        "last_kernel_size": 3,
        "residual_kernel_size": 3,
        "dilation_growth_rate": 2,
        "use_causal_conv": True,
        "pad_mode": "constant",
        "compress": 2,
        "trim_right_ratio": 1.0,
        "codebook_size": CODEBOOK,
        "codebook_dim": 16,
        "num_quantizers": 32,
        "use_conv_shortcut": False,
        "vector_quantization_hidden_dimension": 16,
        "num_semantic_quantizers": 1,
        "upsample_groups": 16,
        "num_hidden_layers": 1,
        "intermediate_size": 32,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "hidden_act": "gelu",
        "max_position_embeddings": 8000,
        "initializer_range": 0.02,
        "norm_eps": 1e-5,
        "use_cache": False,
        "use_streaming": False,
        "rope_theta": 10000.0,
        "sliding_window": 250,
        "attention_dropout": 0.0,
        "layer_scale_initial_scale": 0.01,
        "attention_bias": False,
    }
    decoder = {
        "codebook_size": CODEBOOK,
        "codebook_dim": 16,
        "hidden_size": 16,
        "latent_dim": 16,
        "max_position_embeddings": 8000,
        "rope_theta": 10000,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "attention_bias": False,
        "sliding_window": 4,
        "intermediate_size": 32,
        "hidden_act": "silu",
        "layer_scale_initial_scale": 0.01,
        "rms_norm_eps": 1e-5,
        "num_hidden_layers": 2,
        "num_quantizers": 16,
        "upsample_rates": [8, 5, 4, 3],
        "upsampling_ratios": [2, 2],
        "decoder_dim": 32,
        "attention_dropout": 0.0,
    }
    speech = {
        "architectures": ["Qwen3TTSTokenizerV2Model"],
        "model_type": "qwen3_tts_tokenizer_12hz",
        "encoder_config": mimi,
        "decoder_config": decoder,
        "encoder_valid_num_quantizers": 16,
        "input_sample_rate": 24000,
        "output_sample_rate": 24000,
        "decode_upsample_rate": 1920,
        "encode_downsample_rate": 1920,
    }
    return config, speech


GENERATION = {
    "do_sample": True,
    "repetition_penalty": 1.05,
    "temperature": 0.9,
    "top_p": 1.0,
    "top_k": 50,
    "subtalker_dosample": True,
    "subtalker_temperature": 0.9,
    "subtalker_top_k": 50,
    "subtalker_top_p": 1.0,
    "max_new_tokens": 8192,
}

_KEEP = (
    "norm",
    "layernorm",
    "layer_scale",
    "gamma",
    "cluster_usage",
    "alpha",
    "beta",
    "initialized",
)


def _randomise(
    module: torch.nn.Module, generator: torch.Generator, table_std: float, std: float
) -> None:
    """Seeded random weights, so a seed gives the same checkpoint (norm and scale parameters keep
    their constant init): the talker's are large enough that the prompt steers the codes, the
    codec's small enough not to clip."""
    with torch.no_grad():
        for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
            if (
                any(k in name for k in _KEEP)
                or not tensor.is_floating_point()
                or "inv_freq" in name
            ):
                continue
            if name.endswith("bias"):
                scale = 0.02
            else:
                scale = table_std if ("embedding" in name or "embed_sum" in name) else std
            tensor.copy_(torch.randn(tensor.shape, generator=generator) * scale)


def _save(state: dict[str, torch.Tensor], path: Path) -> None:
    from safetensors.torch import save_file

    save_file(
        {k: v.detach().contiguous().clone() for k, v in state.items()},
        str(path),
        metadata={"format": "pt"},
    )


def build_tiny_qwen3_tts(
    path: str | Path, kind: str = "custom_voice", size: str = "1b7", seed: int = 0
) -> Path:
    """Write a tiny random Qwen3-TTS checkpoint of ``kind`` (custom_voice, voice_design, base) to
    ``path`` in the official layout; ``size`` is the ``tts_model_size`` label ("0b6" disables
    CustomVoice instructions, as on the real 0.6B). Returns ``path``."""
    from omni_qwen.tts.config import KINDS, Qwen3TTSConfig, SpeechTokenizerConfig
    from omni_qwen.tts.speaker import SpeakerEncoder
    from omni_qwen.tts.speech_tokenizer import SpeechTokenizer, to_official_keys
    from omni_qwen.tts.talker import Talker

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}")
    folder = Path(path)
    (folder / "speech_tokenizer").mkdir(parents=True, exist_ok=True)
    tokens = write_tokenizer(folder)
    raw, raw_speech = tiny_configs(kind, size, tokens)
    generator = torch.Generator().manual_seed(seed)
    config = Qwen3TTSConfig.from_dict(raw)
    talker = Talker(config.talker)
    _randomise(talker, generator, 0.3, 0.2)
    state = {f"talker.{k}": v for k, v in talker.state_dict().items()}
    if kind == "base":
        speaker = SpeakerEncoder(config.speaker_encoder)
        _randomise(speaker, generator, 0.3, 0.2)
        state.update({f"speaker_encoder.{k}": v for k, v in speaker.state_dict().items()})
    _save(state, folder / "model.safetensors")
    codec = SpeechTokenizer(SpeechTokenizerConfig.from_dict(raw_speech))
    _randomise(codec, generator, 1.0, 0.08)
    _save(to_official_keys(codec.state_dict()), folder / "speech_tokenizer" / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(raw, indent=2), encoding="utf-8")
    (folder / "generation_config.json").write_text(
        json.dumps(GENERATION, indent=2), encoding="utf-8"
    )
    (folder / "speech_tokenizer" / "config.json").write_text(
        json.dumps(raw_speech, indent=2), encoding="utf-8"
    )
    preprocessor = {
        "feature_extractor_type": "EncodecFeatureExtractor",
        "feature_size": 1,
        "padding_side": "right",
        "padding_value": 0.0,
        "return_attention_mask": True,
        "sampling_rate": 24000,
        "chunk_length_s": None,
        "overlap": None,
    }
    (folder / "speech_tokenizer" / "preprocessor_config.json").write_text(
        json.dumps(preprocessor, indent=2)
    )
    return folder
