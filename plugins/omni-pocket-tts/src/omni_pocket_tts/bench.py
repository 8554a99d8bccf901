"""Pocket TTS checkpoints at the published size with random weights, for serving benchmarks.

``bench/speech_http_models.py`` (``bench/qwen3_tts_http_bench.py --models pocket-tts``) writes
one and measures it through a real ``omni serve`` (first audio, real-time factor). The folder is
the official layout (config, safetensors, generation config, processor files, the codec in
``audio_tokenizer/``, one built-in voice); the backbone (6 layers of 1024), the flow head
(6 blocks of 512) and the codec (Mimi's SEANet and transformer, 32-d latents at 12.5 Hz,
24 kHz) have the sizes of transformers' ``PocketTTSConfig`` and
``PocketTTSAudioTokenizerConfig`` defaults, the released model's; weights seeded random
(transformers' own initialisation), saved in float32 as the released ones are.

The tokenizer is the tiny character-level one of :mod:`omni_pocket_tts.testing` (its
placeholders given the config's ids); prompts are more tokens than SentencePiece's would be.
Random weights never end a clip where a trained model would: a benchmark request sets
``eos_threshold`` out of reach and makes exactly ``max_new_tokens`` frames, 80 ms each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def real_configs(size: str = "100m") -> tuple[Any, Any, Any]:
    """(the tokenizer, Pocket TTS's config, the codec's config) at the published size;
    ``tiny``: the test checkpoint's."""
    from transformers import PocketTTSAudioTokenizerConfig, PocketTTSConfig

    from omni_pocket_tts.testing import PLACEHOLDERS, tiny_codec_config, tiny_config, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    codec = tiny_codec_config() if size == "tiny" else PocketTTSAudioTokenizerConfig()
    if size == "tiny":
        return tokenizer, tiny_config(tokenizer, codec.frame_rate), codec
    if size != "100m":
        raise ValueError(f"size {size!r}: expected 100m or tiny")
    ids = tokenizer.convert_tokens_to_ids(list(PLACEHOLDERS.values()))
    config = PocketTTSConfig(
        audio_prompt_token_id=ids[0],
        audio_latent_token_id=ids[1],
        audio_prompt_bos_token_id=ids[2],
        audio_bos_token_id=ids[3],
        frame_rate=codec.frame_rate,
        architectures=["PocketTTSForConditionalGeneration"],
    )
    return tokenizer, config, codec


def build_random_pocket_tts(
    path: Path | str, *, size: str = "100m", device: Any = None, seed: int = 0
) -> Path:
    """Write Pocket TTS with seeded random weights to ``path`` (``size`` ``100m``, or
    ``tiny``: the test checkpoint's sizes, for a CPU smoke run of a benchmark)."""
    import torch
    from transformers import PocketTTSAudioTokenizerModel, PocketTTSForConditionalGeneration

    from omni_pocket_tts.testing import generation_config, save_processor, save_voice

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer, config, codec_config = real_configs(size)
    if device is None:  # random numbers are fast on the accelerator
        device = torch.accelerator.current_accelerator() or "cpu"
    torch.manual_seed(seed)
    with torch.device(device):
        model = PocketTTSForConditionalGeneration(config).eval()
        codec = PocketTTSAudioTokenizerModel(codec_config).eval()
    model.generation_config = generation_config()
    model.save_pretrained(path)
    save_processor(path, codec.to("cpu"), tokenizer)
    with torch.no_grad():  # one built-in voice: the codec's latents of 2 s of noise
        audio = torch.randn(1, 1, 2 * int(codec_config.sampling_rate)) * 0.1
        save_voice(path, "alba", codec.encode(audio).latents[0])
    return path
