"""VibeVoice checkpoints at the real sizes with random weights, for serving benchmarks.

``bench/vibevoice_http.sh`` (``bench/qwen3_tts_http_bench.py --models vibevoice-1.5b``) writes
one and measures it through a real ``omni serve`` (first audio, real-time factor). The folder is the
official layout (config, safetensors, generation config, processor and chat template); the
language model, the diffusion head and both codecs have the real widths and depths of
``vibevoice/VibeVoice-1.5B-hf`` (or ``-7B-hf``), weights seeded random (bf16).

Random weights never say when to stop, so every request would end at an arbitrary step. Here
the language model's final norm is 0: every logit is 0 and the argmax over VibeVoice's four
tokens picks the one with the lowest id, which this folder's tokenizer gives the speech token.
So every step makes a frame, a request makes exactly ``max_new_tokens`` frames, and each step
costs what the real model's costs (every matmul still runs; only the values are degenerate).
The tokenizer is the tiny in-process one (prompts are more tokens than Qwen2.5's would make).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The Qwen2.5 language models of the official checkpoints (vocabulary and widths).
TEXT: dict[str, dict[str, Any]] = {
    "1.5b": {
        "vocab_size": 151936,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
    },
    "7b": {
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "tie_word_embeddings": False,
    },
}
#: The tokenizer's special tokens, the speech token first (the lowest id of the four).
SPECIALS = (
    "<|vision_pad|>",
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
)


def real_config(tokenizer: Any, size: str = "1.5b") -> Any:
    """VibeVoice's config at a published size (transformers' defaults are the codecs' and the
    diffusion head's real ones; the head's width is the language model's); ``tiny``: the test
    checkpoint's sizes, for a CPU smoke run of a benchmark."""
    from transformers import VibeVoiceConfig

    if size == "tiny":
        from omni_vibevoice.testing import tiny_config

        return tiny_config(tokenizer)
    if size not in TEXT:
        raise ValueError(f"size {size!r}: expected one of tiny, {', '.join(TEXT)}")
    text = TEXT[size]
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIALS}
    return VibeVoiceConfig(
        text_config={
            "model_type": "qwen2",
            **text,
            "max_position_embeddings": 65536,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6,
        },
        diffusion_head_config={"hidden_size": text["hidden_size"]},
        pad_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|endoftext|>"],
        audio_bos_token_id=ids["<|vision_start|>"],
        audio_eos_token_id=ids["<|vision_end|>"],
        audio_token_id=ids["<|vision_pad|>"],
        architectures=["VibeVoiceForConditionalGeneration"],
    )


def build_random_vibevoice(
    path: Path | str,
    *,
    size: str = "1.5b",
    max_new_tokens: int = 75,
    dtype: str = "bfloat16",
    device: Any = None,
    seed: int = 0,
) -> Path:
    """Write a real-size VibeVoice with seeded random weights to ``path`` (see the module
    docstring: every step speaks; ``max_new_tokens`` frames per request, 75 = 10 s; ``size``
    ``1.5b``, ``7b``, or ``tiny``: the test checkpoint's sizes)."""
    import torch
    from omni_core.bench import materialize_random_
    from transformers import VibeVoiceForConditionalGeneration

    from omni_vibevoice.testing import _tokenizer, generation_config, save_processor

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(SPECIALS)
    config = real_config(tokenizer, size)
    if device is None:  # random numbers are fast on the accelerator
        device = torch.accelerator.current_accelerator() or "cpu"
    with torch.device("meta"):
        model = VibeVoiceForConditionalGeneration(config)
    materialize_random_(model, torch.device(device), getattr(torch, dtype), seed)
    with torch.no_grad():
        model.model.language_model.norm.weight.zero_()  # every logit 0: the speech token wins
    model.generation_config = generation_config(config, max_new_tokens=max_new_tokens)
    model.save_pretrained(path)
    save_processor(path, tokenizer, config)
    return path
