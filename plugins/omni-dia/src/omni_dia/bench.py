"""Dia checkpoints at the published size with random weights, for serving benchmarks.

``bench/speech_http_models.py`` (``bench/qwen3_tts_http_bench.py --models dia-1.6b``) writes one
and measures it through a real ``omni serve`` (first audio, real-time factor). The folder is the
official layout (config, safetensors, generation config, processor files) with the DAC codec in
``dac/``; the encoder, the decoder and DAC have the widths and depths of
``nari-labs/Dia-1.6B-0626`` and ``descript/dac_44khz`` (transformers' ``DiaConfig`` and
``DacConfig`` defaults with DAC's 44.1 kHz rate), weights seeded random (bf16; DAC float32).

Random weights never end a clip on their own, so a request makes exactly ``max_new_tokens``
positions: ``max_new_tokens - 16`` frames of audio (the first 15 positions fill the delayed
codebooks), each 512 samples at 44.1 kHz.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: ``descript/dac_44khz``: 9 codebooks of 1024, 512 samples a frame.
DAC_44KHZ: dict[str, Any] = {
    "encoder_hidden_size": 64,
    "downsampling_ratios": [2, 4, 8, 8],
    "decoder_hidden_size": 1536,
    "n_codebooks": 9,
    "codebook_size": 1024,
    "codebook_dim": 8,
    "sampling_rate": 44100,
}


def real_configs(size: str = "1.6b") -> tuple[Any, Any]:
    """(Dia's config, DAC's config) at the published size; ``tiny``: the test checkpoint's."""
    from transformers import DacConfig, DiaConfig

    if size == "tiny":
        from omni_dia.testing import tiny_config, tiny_dac_config

        return tiny_config(), tiny_dac_config()
    if size != "1.6b":
        raise ValueError(f"size {size!r}: expected 1.6b or tiny")
    # transformers' defaults are the published Dia-1.6B sizes (encoder 12 x 1024, decoder
    # 18 x 2048 with 4 key/value heads, 9 channels of 1028 tokens, 3072 positions)
    return DiaConfig(architectures=["DiaForConditionalGeneration"]), DacConfig(**DAC_44KHZ)


def build_random_dia(
    path: Path | str,
    *,
    size: str = "1.6b",
    dtype: str = "bfloat16",
    device: Any = None,
    seed: int = 0,
) -> Path:
    """Write Dia with seeded random weights to ``path`` (``size`` ``1.6b``, or ``tiny``: the
    test checkpoint's sizes, for a CPU smoke run of a benchmark)."""
    import torch
    from omni_core.bench import materialize_random_
    from transformers import DacModel, DiaForConditionalGeneration

    from omni_dia.testing import generation_config, save_processor

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config, dac_config = real_configs(size)
    if device is None:  # random numbers are fast on the accelerator
        device = torch.accelerator.current_accelerator() or "cpu"
    with torch.device("meta"):
        model = DiaForConditionalGeneration(config)
        dac = DacModel(dac_config)
    materialize_random_(model, torch.device(device), getattr(torch, dtype), seed)
    materialize_random_(dac, torch.device(device), torch.float32, seed + 1)
    model.generation_config = generation_config()
    model.save_pretrained(path)
    save_processor(path, dac.eval())
    return path
