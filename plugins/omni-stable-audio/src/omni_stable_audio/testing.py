"""A tiny random-weight Stable Audio checkpoint in the official Hub layout
(stabilityai/stable-audio-open-1.0's ``model_index.json``: ``StableAudioPipeline`` with a
``T5EncoderModel`` behind a ``T5Tokenizer``, ``StableAudioProjectionModel``,
``StableAudioDiTModel``, ``AutoencoderOobleck`` and a ``CosineDPMSolverMultistepScheduler``
with the published config), built with diffusers' and transformers' own classes in seconds, for
tests and demos.

The T5 encoder is 2 layers of width 32; the DiT has 2 blocks of 4 heads x 8 (2 K/V heads) over
256 latent frames; the Oobleck VAE is stereo at 16 kHz with a hop of 16 samples, so the model
makes at most 0.256 s (the real one: 47.55 s at 44.1 kHz, a hop of 2048). The tokenizer is a
unigram T5 tokenizer over a few captions' words and characters.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: stable-audio-open-1.0's scheduler_config.json (diffusers' CosineDPMSolverMultistepScheduler).
SCHEDULER: dict[str, Any] = {
    "sigma_min": 0.3,
    "sigma_max": 500.0,
    "sigma_data": 1.0,
    "sigma_schedule": "exponential",
    "num_train_timesteps": 1000,
    "solver_order": 2,
    "prediction_type": "v_prediction",
    "rho": 7.0,
    "solver_type": "midpoint",
    "lower_order_final": True,
    "euler_at_final": False,
    "final_sigmas_type": "zero",
}
#: The width of the tiny T5 encoder (the projection's input).
TEXT_DIM = 32
#: The conditioning width (text tokens and each of the two seconds tokens).
COND_DIM = 16
SAMPLE_RATE = 16000
_CORPUS = (
    "the sound of a hammer hitting a wooden surface",
    "a dog barking in the rain",
    "calm ambient music with soft synthesizer pads",
    "low quality, noise, distortion",
    "thunder and rain on a tin roof",
)


def build_tokenizer(max_length: int = 128) -> Any:
    """A ``T5Tokenizer`` (unigram) over the corpus' words and characters, padded to
    ``max_length`` like the real one (stable-audio-open-1.0's model_max_length is 128)."""
    from transformers import T5Tokenizer

    words = sorted({w for line in _CORPUS for w in line.replace(",", " ,").split()})
    chars = sorted({c for line in _CORPUS for c in line if c != " "})
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    vocab += [(f"\u2581{w}", -1.0) for w in words] + [(c, -5.0) for c in chars]
    tokenizer = T5Tokenizer(vocab=vocab, extra_ids=0)
    tokenizer.model_max_length = max_length
    return tokenizer


def _spread(module: Any, std: float) -> None:
    """Widen the random init so the tiny networks make audio with structure (a near-silent
    waveform would make parity meaningless)."""
    import torch

    with torch.no_grad():
        for name, param in module.named_parameters():
            if param.dim() > 1:
                param.normal_(0.0, std)
            elif "bias" in name:
                param.normal_(0.0, 0.05)


def build_tiny_stable_audio(path: str | Path, *, seed: int = 0) -> Path:
    """Write the tiny checkpoint (see the module docstring) to ``path`` (created); returns it."""
    import diffusers
    import torch
    from diffusers import (
        AutoencoderOobleck,
        CosineDPMSolverMultistepScheduler,
        StableAudioDiTModel,
        StableAudioProjectionModel,
    )
    from transformers import T5Config, T5EncoderModel

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    text_encoder = T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer),
            d_model=TEXT_DIM,
            d_kv=8,
            d_ff=48,
            num_layers=2,
            num_heads=4,
            relative_attention_num_buckets=8,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    ).eval()
    projection = StableAudioProjectionModel(
        text_encoder_dim=TEXT_DIM, conditioning_dim=COND_DIM, min_value=0, max_value=512
    ).eval()
    transformer = StableAudioDiTModel(
        sample_size=256,
        in_channels=8,
        num_layers=2,
        attention_head_dim=8,
        num_attention_heads=4,
        num_key_value_attention_heads=2,
        out_channels=8,
        cross_attention_dim=32,
        time_proj_dim=16,
        global_states_input_dim=2 * COND_DIM,
        cross_attention_input_dim=COND_DIM,
    ).eval()
    vae = AutoencoderOobleck(
        encoder_hidden_size=8,
        downsampling_ratios=[2, 8],
        channel_multiples=[1, 2],
        decoder_channels=8,
        decoder_input_channels=8,
        audio_channels=2,
        sampling_rate=SAMPLE_RATE,
    ).eval()
    _spread(transformer, 0.2)
    _spread(projection, 0.3)
    for name, component in (
        ("text_encoder", text_encoder),
        ("projection_model", projection),
        ("transformer", transformer),
        ("vae", vae),
    ):
        component.save_pretrained(path / name, safe_serialization=True)
    tokenizer.save_pretrained(path / "tokenizer")
    CosineDPMSolverMultistepScheduler(**SCHEDULER).save_pretrained(path / "scheduler")
    index = {
        "_class_name": "StableAudioPipeline",
        "_diffusers_version": diffusers.__version__,
        "projection_model": ["stable_audio", "StableAudioProjectionModel"],
        "scheduler": ["diffusers", "CosineDPMSolverMultistepScheduler"],
        "text_encoder": ["transformers", "T5EncoderModel"],
        "tokenizer": ["transformers", "T5TokenizerFast"],
        "transformer": ["diffusers", "StableAudioDiTModel"],
        "vae": ["diffusers", "AutoencoderOobleck"],
    }
    (path / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    return path
