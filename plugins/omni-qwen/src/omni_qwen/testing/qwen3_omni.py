"""Tiny random Qwen3-Omni checkpoints in the official layout, built in-process (no network).

``build_tiny_qwen3_omni(path)`` writes what ``Qwen/Qwen3-Omni-30B-A3B-Instruct`` holds:
``config.json`` (``architectures: [Qwen3OmniMoeForConditionalGeneration]``, the real nested
thinker / talker / code2wav configs), ``generation_config.json``, ``model.safetensors`` (the
real key names: transformers' own model, saved), the tokenizer (a byte-level BPE Qwen2
tokenizer with the chat, vision, audio and TTS special tokens), ``preprocessor_config.json``
(image processor + Whisper feature extractor) and ``chat_template.json``, so that
``Qwen3OmniMoeProcessor.from_pretrained`` and ``from_pretrained`` of the model load it offline.
The sizes are tiny but the structure is real: MoE thinker and talker (with a shared expert),
a code predictor filling the residual codebooks, a causal-conv code2wav at 24 kHz / 12.5 Hz.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import qwen3_tts

#: Audio codes per codebook (the talker's vocabulary adds 1024 control ids above them).
CODEBOOK = 32
CODE_GROUPS = 8
TALKER_VOCAB = CODEBOOK + 1024
SPEAKERS = {"ethan": CODEBOOK + 40, "chelsie": CODEBOOK + 41, "aiden": CODEBOOK + 42}
SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
    "<tts_text_bos_single>",
)
#: The model-specific tokens transformers' Qwen3-Omni processor reads off the tokenizer.
NAMED = {
    "image_token": "<|image_pad|>",
    "audio_token": "<|audio_pad|>",
    "video_token": "<|video_pad|>",
    "vision_bos_token": "<|vision_start|>",
    "vision_eos_token": "<|vision_end|>",
    "audio_bos_token": "<|audio_start|>",
    "audio_eos_token": "<|audio_end|>",
}

#: The official chat template's prompt format (system / user / assistant turns, media
#: placeholders where the parts are), written for the tiny tokenizer.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}"
    "{%- elif part['type'] == 'image' -%}{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'video' -%}{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'audio' -%}{{- '<|audio_start|><|audio_pad|><|audio_end|>' -}}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def write_tokenizer(folder: Path) -> dict[str, int]:
    """The Qwen3-TTS tiny checkpoints' byte-level BPE tokenizer (``tokenizer.json`` and
    ``tokenizer_config.json`` next to ``vocab.json`` / ``merges.txt``) plus Qwen3-Omni's media
    and TTS special tokens, and the named ones its processor reads; returns the ids of the
    special tokens and of the words ``user`` / ``assistant`` (``system``: its first piece)."""
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    qwen3_tts.write_tokenizer(folder)  # the TTS tokenizer, plus the omni tokens below
    tokenizer = AutoTokenizer.from_pretrained(folder)
    new = [t for t in SPECIALS if t not in tokenizer.get_vocab()]
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in new])
    tokenizer.save_pretrained(folder)
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    for key in ("is_local", "local_files_only"):
        config.pop(key, None)
    config["extra_special_tokens"] = dict(NAMED)
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (*SPECIALS, "user", "assistant")}
    ids["system"] = tokenizer("system", add_special_tokens=False)["input_ids"][0]
    return ids


def moe_text(
    vocab: int,
    hidden: int,
    layers: int,
    *,
    heads: int = 2,
    kv_heads: int = 1,
    head_dim: int = 16,
    experts: int = 4,
    active: int = 2,
    expert_size: int = 16,
    mrope: tuple[int, int, int] = (2, 3, 3),
    **extra: Any,
) -> dict[str, Any]:
    """A Qwen3-Omni MoE text config (thinker or talker): tiny by default; the benchmark passes
    the real sizes."""
    return {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "moe_intermediate_size": expert_size,
        "num_experts": experts,
        "num_experts_per_tok": active,
        "decoder_sparse_step": 1,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 1000000.0,
            "mrope_section": list(mrope),
            "interleaved": True,
            "mrope_interleaved": True,
        },
        **extra,
    }


def tiny_config(tokens: dict[str, int]) -> dict[str, Any]:
    """config.json of a tiny Qwen3-Omni with the tokenizer's special ids."""
    text_vocab = max(tokens.values()) + 1
    hidden = 32
    thinker = {
        "audio_config": {
            "num_mel_bins": 128,
            "encoder_layers": 1,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 32,
            "d_model": 16,
            "output_dim": hidden,
            "n_window": 50,
            "n_window_infer": 800,
            "conv_chunksize": 500,
            "downsample_hidden_size": 8,
            "max_source_positions": 1500,
        },
        "vision_config": {
            "depth": 2,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_heads": 2,
            "in_channels": 3,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": hidden,
            "num_position_embeddings": 64,
            "deepstack_visual_indexes": [0],
        },
        "text_config": moe_text(text_vocab, hidden, 3, norm_topk_prob=True),
        "audio_token_id": tokens["<|audio_pad|>"],
        "image_token_id": tokens["<|image_pad|>"],
        "video_token_id": tokens["<|video_pad|>"],
        "audio_start_token_id": tokens["<|audio_start|>"],
        "vision_start_token_id": tokens["<|vision_start|>"],
        "position_id_per_seconds": 13,
        "user_token_id": tokens["user"],
    }
    talker = {
        "text_config": moe_text(
            TALKER_VOCAB, hidden, 2, shared_expert_intermediate_size=16, norm_topk_prob=False
        ),
        "code_predictor_config": {
            "vocab_size": CODEBOOK,
            "hidden_size": hidden,
            "intermediate_size": 48,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "max_position_embeddings": 64,
            "rms_norm_eps": 1e-6,
            "num_code_groups": CODE_GROUPS,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        },
        "num_code_groups": CODE_GROUPS,
        "thinker_hidden_size": hidden,
        "accept_hidden_layer": 2,
        "codec_pad_id": CODEBOOK + 20,
        "codec_bos_id": CODEBOOK + 21,
        "codec_eos_token_id": CODEBOOK + 22,
        "codec_nothink_id": CODEBOOK + 27,
        "codec_think_bos_id": CODEBOOK + 28,
        "codec_think_eos_id": CODEBOOK + 29,
        "speaker_id": dict(SPEAKERS),
        "audio_token_id": tokens["<|audio_pad|>"],
        "image_token_id": tokens["<|image_pad|>"],
        "video_token_id": tokens["<|video_pad|>"],
        "vision_start_token_id": tokens["<|vision_start|>"],
        "audio_start_token_id": tokens["<|audio_start|>"],
        "position_id_per_seconds": 13,
        "spatial_merge_size": 2,
    }
    code2wav = {
        "codebook_size": CODEBOOK,
        "hidden_size": 16,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "intermediate_size": 32,
        "num_hidden_layers": 2,
        "sliding_window": 72,
        "num_quantizers": CODE_GROUPS,
        "upsample_rates": [8, 5, 4, 3],
        "upsampling_ratios": [2, 2],
        "decoder_dim": 16,
        "max_position_embeddings": 8000,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    }
    return {
        "architectures": ["Qwen3OmniMoeForConditionalGeneration"],
        "model_type": "qwen3_omni_moe",
        "thinker_config": thinker,
        "talker_config": talker,
        "code2wav_config": code2wav,
        "enable_audio_output": True,
        "im_start_token_id": tokens["<|im_start|>"],
        "im_end_token_id": tokens["<|im_end|>"],
        "tts_pad_token_id": tokens["<tts_pad>"],
        "tts_bos_token_id": tokens["<tts_text_bos>"],
        "tts_eos_token_id": tokens["<tts_text_eod>"],
        "system_token_id": tokens["system"],
        "user_token_id": tokens["user"],
        "assistant_token_id": tokens["assistant"],
    }


def write_processor(folder: Path) -> None:
    """``preprocessor_config.json`` (the Qwen2-VL image processor's and the Whisper feature
    extractor's fields in one file, as the official repo has them),
    ``video_preprocessor_config.json`` and ``chat_template.json``."""
    from transformers import Qwen2VLImageProcessorPil, WhisperFeatureExtractor

    pixels = {"shortest_edge": 32 * 32, "longest_edge": 64 * 64}
    vision = {
        "patch_size": 16,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    }
    image = Qwen2VLImageProcessorPil(size=pixels, **vision)
    audio = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160)
    merged = {**audio.to_dict(), **image.to_dict(), "processor_class": "Qwen3OmniMoeProcessor"}
    merged.pop("mel_filters", None)
    merged["resample"] = int(merged["resample"])
    merged["image_processor_type"] = "Qwen2VLImageProcessor"
    _dump(folder / "preprocessor_config.json", merged)
    video = {
        **vision,
        "size": {"shortest_edge": 32 * 32, "longest_edge": 64 * 64 * 4},
        "video_processor_type": "Qwen2VLVideoProcessor",
        "processor_class": "Qwen3OmniMoeProcessor",
    }
    _dump(folder / "video_preprocessor_config.json", video)
    _dump(folder / "chat_template.json", {"chat_template": CHAT_TEMPLATE})


def _dump(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True), encoding="utf-8")


def build_tiny_qwen3_omni(path: str | Path, *, seed: int = 0) -> Path:
    """Write a tiny random Qwen3-Omni checkpoint (official layout) to ``path``; return it."""
    import torch
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    tokens = write_tokenizer(folder)
    config = Qwen3OmniMoeConfig(**tiny_config(tokens))
    model = Qwen3OmniMoeForConditionalGeneration(config).eval()
    with torch.no_grad():  # random weights a little larger than init, so codes vary
        generator = torch.Generator().manual_seed(seed)
        for name, param in model.named_parameters():
            if param.ndim >= 2 and "code2wav" not in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
        _audible(model.code2wav, seed)
        _end_answers(model, folder, tokens)
    model.save_pretrained(folder, safe_serialization=True)
    gen = {"eos_token_id": [tokens["<|im_end|>"], tokens["<|endoftext|>"]], "do_sample": False}
    (folder / "generation_config.json").write_text(json.dumps(gen, indent=2), encoding="utf-8")
    write_processor(folder)
    return folder


#: The conversation the tiny checkpoint's answers are made to end on (the fidelity tests').
CANONICAL = "hello world"


def _audible(code2wav: Any, seed: int) -> None:
    """code2wav weights that keep the signal's scale through the stack (``1/sqrt(fan_in)``,
    layer scales 0.1) and a quiet last convolution: audio of about 0.2 RMS, never clipped
    (transformers' init makes a near-silent ~1e-8)."""
    import math

    import torch

    generator = torch.Generator().manual_seed(seed + 7)
    for name, param in code2wav.named_parameters():
        if param.ndim >= 2:
            fan_in = max(param[0].numel(), 1)
            param.copy_(torch.randn(param.shape, generator=generator) / math.sqrt(fan_in))
        elif name.endswith("scale"):
            param.fill_(0.1)
    code2wav.decoder[-1].conv.weight.mul_(0.02)


def _candidates(tokens: list[int], start: int) -> list[int]:
    """Tokens first made at ``start`` or later, in order."""
    return [t for i, t in enumerate(tokens) if i >= start and t not in tokens[:i]]


def _end_answers(model: Any, folder: Path, tokens: dict[str, int]) -> None:
    """Make random weights end their answers, as trained ones do: the thinker's ``<|im_end|>``
    head row becomes a scaled copy of the row of a token its greedy answer to
    :data:`CANONICAL` first writes after a few tokens (so that answer stops there), and the
    talker's end-of-speech row likewise copies a codebook-0 code its greedy speech first makes
    after a few frames. Other prompts mostly end too, where they would have written those."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": CANONICAL}],
        chat_template=CHAT_TEMPLATE,
        add_generation_prompt=True,
        tokenize=False,
    )
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    head, end = model.thinker.lm_head.weight, tokens["<|im_end|>"]
    head[end] = 0.0  # no answer ends by chance first

    def answer() -> list[int]:
        made = model.thinker.generate(input_ids=ids, max_new_tokens=24, do_sample=False)
        return made[0, ids.shape[1] :].tolist()

    for pick in _candidates(answer(), 8):
        head[end] = head[pick] * 1.2
        made = answer()
        if end in made and made.index(end) >= 6:
            break
    else:
        head[end] = 0.0
    codec, eos = model.talker.codec_head.weight, model.config.talker_config.codec_eos_token_id
    codec[eos] = 0.0
    fed = _talker_codes(model, ids)
    for code in _candidates(fed, 12):
        codec[eos] = codec[code] * 1.2
        if 8 <= len(_talker_codes(model, ids)) < len(fed):
            return
    codec[eos] = 0.0


def _talker_codes(model: Any, ids: Any) -> list[int]:
    """The codebook-0 codes ``generate()``'s greedy talker feeds back for ``ids`` (at most 48)."""
    fed: list[int] = []
    table = model.talker.get_input_embeddings()

    def record(_module: Any, args: Any, _out: Any) -> None:
        if args[0].numel() == 1:  # a decode step's previous code (the prompt's are 6 at once)
            fed.append(int(args[0].reshape(-1)[0]))

    hook = table.register_forward_hook(record)
    try:
        model.generate(
            input_ids=ids,
            speaker="ethan",
            thinker_max_new_tokens=24,
            thinker_do_sample=False,
            thinker_eos_token_id=model.config.im_end_token_id,
            talker_do_sample=False,
            talker_max_new_tokens=48,
        )
    except RuntimeError:  # generate() fails on speech that ends at its first frame
        return []
    finally:
        hook.remove()
    return fed
