"""Tiny random Qwen2.5-Omni checkpoints in the official layout, built in-process (no network).

:func:`build_tiny_qwen25_omni` (``path``) writes what ``Qwen/Qwen2.5-Omni-7B`` holds, at tiny sizes:
``config.json`` (``Qwen2_5OmniForConditionalGeneration``, thinker + talker + token2wav
sub-configs with their real field names), ``generation_config.json``, ``model.safetensors`` (saved
by transformers' own ``save_pretrained``, so the key names are the real ones), ``spk_dict.pt``
(two speakers: ``cond``, ``ref_mel``, ``bos_token``, loadable with ``weights_only=True``) and the
processor files (``Qwen2_5OmniProcessor.save_pretrained``: a byte-level BPE Qwen2 tokenizer made
here with the chat, media and TTS special tokens, a chat template, the Whisper feature
extractor, the Qwen2-VL image and video processors), so ``Qwen2_5OmniProcessor.from_pretrained``
and ``Qwen2_5OmniForConditionalGeneration.from_pretrained`` both work offline on it.

The structure is the real one (mrope sections, windowed vision attention, a DiT whose codes
repeat twice into 80-bin mels, a BigVGAN upsampling 240x, so 480 samples per code at 24 kHz);
the weights are seeded random ones, larger than transformers' init so the prompt steers the
answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .bpe import write_tiny_tokenizer

WORDS = ("assistant", "user", "system", "hello", "world", "the", "image", "sound")
SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|AUDIO|>",
    "<|audio_bos|>",
    "<|audio_eos|>",
    "<|vision_bos|>",
    "<|vision_eos|>",
    "<|IMAGE|>",
    "<|VIDEO|>",
    "<|tts_pad|>",
    "<|tts_bos|>",
    "<|tts_eos|>",
    "<|spk_chelsie|>",
    "<|spk_ethan|>",
)
#: The speakers of the tiny spk_dict.pt (the official checkpoint has Chelsie and Ethan).
SPEAKERS = ("Chelsie", "Ethan")
CODEC_VOCAB = 128
CODEC = {"pad": 120, "bos": 121, "eos": 122, "mask": 124}

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<|vision_bos|><|IMAGE|><|vision_eos|>"
    "{% elif content['type'] == 'audio' %}<|audio_bos|><|AUDIO|><|audio_eos|>"
    "{% elif content['type'] == 'video' %}<|vision_bos|><|VIDEO|><|vision_eos|>"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write_tokenizer(folder: Path) -> dict[str, int]:
    """vocab.json, merges.txt, tokenizer_config.json of a byte-level BPE Qwen2 tokenizer with the
    chat, media and TTS tokens (named as transformers' omni processors read them)."""
    media = {
        "image_token": "<|IMAGE|>",
        "audio_token": "<|AUDIO|>",
        "video_token": "<|VIDEO|>",
        "vision_bos_token": "<|vision_bos|>",
        "vision_eos_token": "<|vision_eos|>",
        "audio_bos_token": "<|audio_bos|>",
        "audio_eos_token": "<|audio_eos|>",
    }
    config = {"additional_special_tokens": None, "extra_special_tokens": media}
    return write_tiny_tokenizer(folder, WORDS, SPECIALS, config)


def tiny_config(ids: dict[str, int], vocab: int) -> dict[str, Any]:
    """config.json of the tiny model (``vocab``: the thinker's text vocabulary)."""
    hidden = 64
    media = {
        "audio_token_index": ids["<|AUDIO|>"],
        "image_token_index": ids["<|IMAGE|>"],
        "video_token_index": ids["<|VIDEO|>"],
        "audio_start_token_id": ids["<|audio_bos|>"],
        "audio_end_token_id": ids["<|audio_eos|>"],
    }
    rope = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]}
    thinker = {
        "model_type": "qwen2_5_omni_thinker",
        **media,
        "vision_start_token_id": ids["<|vision_bos|>"],
        "vision_end_token_id": ids["<|vision_eos|>"],
        "user_token_id": ids["<|im_start|>"],
        "initializer_range": 0.02,
        "audio_config": {
            "model_type": "qwen2_5_omni_audio_encoder",
            "num_mel_bins": 128,
            "encoder_layers": 2,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 64,
            "d_model": 32,
            "max_source_positions": 1500,
            "n_window": 100,
            "output_dim": hidden,
        },
        "vision_config": {
            "model_type": "qwen2_5_omni_vision_encoder",
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "in_channels": 3,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 56,
            "out_hidden_size": hidden,
            "fullatt_block_indexes": [1],
        },
        "text_config": {
            "model_type": "qwen2_5_omni_text",
            "vocab_size": vocab,
            "hidden_size": hidden,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-6,
            "rope_parameters": rope,
            "tie_word_embeddings": False,
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
        },
    }
    talker = {
        "model_type": "qwen2_5_omni_talker",
        **media,
        "vision_start_token_id": ids["<|vision_bos|>"],
        "vision_end_token_id": ids["<|vision_eos|>"],
        "vocab_size": CODEC_VOCAB,
        "tts_text_start_token_id": ids["<|tts_bos|>"],
        "tts_text_end_token_id": ids["<|tts_eos|>"],
        "tts_text_pad_token_id": ids["<|tts_pad|>"],
        "tts_codec_start_token_id": CODEC["bos"],
        "tts_codec_end_token_id": CODEC["eos"],
        "tts_codec_pad_token_id": CODEC["pad"],
        "tts_codec_mask_token_id": CODEC["mask"],
        "embedding_size": hidden,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "max_position_embeddings": 4096,
        "rope_parameters": rope,
        "spatial_merge_size": 2,
    }
    token2wav = {
        "model_type": "qwen2_5_omni_token2wav",
        "dit_config": {
            "model_type": "qwen2_5_omni_dit",
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "head_dim": 16,
            "ff_mult": 2,
            "emb_dim": 16,
            "block_size": 24,
            "look_ahead_layers": [1],
            "look_backward_layers": [0],
            "repeats": 2,
            "num_embeds": CODEC_VOCAB,
            "mel_dim": 80,
            "dropout": 0.0,
            "enc_emb_dim": 16,
            "enc_dim": 16,
            "enc_channels": [16, 16, 16, 16, 48],
            "enc_kernel_sizes": [5, 3, 3, 3, 1],
            "enc_dilations": [1, 2, 3, 4, 1],
            "enc_attention_channels": 8,
            "enc_res2net_scale": 2,
            "enc_se_channels": 8,
            "max_position_embeddings": 8192,
        },
        "bigvgan_config": {
            "model_type": "qwen2_5_omni_bigvgan",
            "mel_dim": 80,
            "upsample_initial_channel": 32,
            "resblock_kernel_sizes": [3],
            "resblock_dilation_sizes": [[1, 3, 5]],
            "upsample_rates": [8, 5, 6],
            "upsample_kernel_sizes": [16, 11, 12],
        },
    }
    return {
        "architectures": ["Qwen2_5OmniForConditionalGeneration"],
        "model_type": "qwen2_5_omni",
        "enable_audio_output": True,
        "thinker_config": thinker,
        "talker_config": talker,
        "token2wav_config": token2wav,
    }


def write_processor(folder: Path) -> None:
    """preprocessor_config.json (the Whisper feature extractor and the Qwen2-VL image processor
    in one file, as the official repo has it), video_preprocessor_config.json and
    chat_template.jinja. Written from the components' own dicts: constructing the processor
    itself needs torchvision (its video processor)."""
    from transformers import Qwen2VLImageProcessor, WhisperFeatureExtractor

    pixels = {"min_pixels": 28 * 28 * 4, "max_pixels": 28 * 28 * 16}
    features = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000).to_dict()
    image = Qwen2VLImageProcessor(**pixels).to_dict()
    for d in (features, image):
        d.pop("_processor_class", None)
    merged = {**features, **image, "processor_class": "Qwen2_5OmniProcessor"}
    merged["image_processor_type"] = "Qwen2VLImageProcessor"
    merged.pop("mel_filters", None)
    (folder / "preprocessor_config.json").write_text(json.dumps(merged, indent=2), "utf-8")
    video = {
        "video_processor_type": "Qwen2VLVideoProcessor",
        "processor_class": "Qwen2_5OmniProcessor",
        "patch_size": 14,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "image_mean": image["image_mean"],
        "image_std": image["image_std"],
        "size": {"shortest_edge": pixels["min_pixels"], "longest_edge": pixels["max_pixels"]},
        **pixels,
    }
    (folder / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2), "utf-8")
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE, "utf-8")


def _randomise(module: Any, seed: int, std: float) -> None:
    """Seeded weights (norms and Snake parameters keep their init), large enough that the
    prompt steers the answer and the vocoder's output is audible."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in module.named_parameters():
            if any(k in name for k in ("norm", "alpha", "beta")) or not tensor.is_floating_point():
                continue
            scale = 0.02 if name.endswith("bias") else std
            tensor.copy_(torch.randn(tensor.shape, generator=generator) * scale)


def build_tiny_qwen25_omni(path: str | Path, seed: int = 0) -> Path:
    """Write a tiny random Qwen2.5-Omni checkpoint to ``path`` (official layout); returns it."""
    import torch
    from transformers import Qwen2_5OmniConfig, Qwen2_5OmniForConditionalGeneration

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    ids = write_tokenizer(folder)
    vocab = max(ids.values()) + 1
    raw = tiny_config(ids, vocab)
    torch.manual_seed(seed)
    model = Qwen2_5OmniForConditionalGeneration(Qwen2_5OmniConfig(**raw)).eval()
    _randomise(model.thinker, seed, 0.15)
    _randomise(model.talker, seed + 1, 0.15)
    _randomise(model.token2wav.code2wav_bigvgan_model, seed + 3, 0.08)
    model.save_pretrained(str(folder), safe_serialization=True)
    # save_pretrained writes the config transformers normalised; the official layout is kept
    (folder / "config.json").write_text(json.dumps(raw, indent=2), encoding="utf-8")
    # a random talker rarely says its end code: its answers stop at 64 codes (1.3 s)
    generation = {
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "do_sample": False,
        "talker_max_new_tokens": 64,
    }
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2), "utf-8")
    generator = torch.Generator().manual_seed(seed + 2)
    speakers = {
        name: {
            "cond": torch.randn(16, generator=generator),
            "ref_mel": torch.randn(40 + 8 * i, 80, generator=generator) * 0.5 - 5.0,
            "bos_token": ids[f"<|spk_{name.lower()}|>"],
        }
        for i, name in enumerate(SPEAKERS)
    }
    torch.save(speakers, folder / "spk_dict.pt")
    write_processor(folder)
    return folder
