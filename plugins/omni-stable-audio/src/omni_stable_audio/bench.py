"""Benchmark workloads of omni-stable-audio: Stable Audio Open 1.0 text to audio, random weights.

Registered by :mod:`omni_stable_audio.plugin` (``omni bench pipeline --workload NAME``). The
folder is what :func:`omni_stable_audio.testing.build_tiny_stable_audio` writes (layout,
tokenizer, the published scheduler); for the real-size workload the DiT (24 blocks of 24 x 64
heads over 1024 latent frames, ~1.1B), the projection model and the Oobleck VAE (stereo 44.1
kHz, a hop of 2048) are diffusers' class defaults (stable-audio-open-1.0's configuration) and
the text encoder is a T5-base of the real widths and depth. Weights are random (seeded) bf16.
The reference is diffusers' ``StableAudioPipeline`` from the same folder, with the same seed.

The runner compares outputs as 8-bit arrays: the waveform in [-1, 1] is mapped onto 0..255
(one level is 2/255 of full scale), so the PSNR reads like an image's. The plugin's parity
tests hold the float waveform to 1e-4.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from omni_core import GenerationResult
from omni_core.bench import Workload

PROMPT = "the sound of a hammer hitting a wooden surface, thunder and rain on a tin roof"
NEGATIVE = "low quality, noise, distortion"
#: google-t5/t5-base's encoder (stable-audio-open-1.0's text encoder).
_T5_BASE: dict[str, Any] = {
    "d_model": 768,
    "d_kv": 64,
    "d_ff": 3072,
    "num_layers": 12,
    "num_heads": 12,
    "relative_attention_num_buckets": 32,
}
#: stable-audio-open-1.0's projection model (diffusers' defaults are its DiT's and VAE's).
_PROJECTION: dict[str, Any] = {
    "text_encoder_dim": 768,
    "conditioning_dim": 768,
    "min_value": 0,
    "max_value": 512,
}


def pcm_levels(waveform: Any) -> np.ndarray:
    """A ``[samples, channels]`` waveform in [-1, 1] as uint8 ``[1, samples, channels]``."""
    array = np.asarray(waveform, dtype=np.float64)
    return (np.clip((array + 1.0) / 2.0, 0.0, 1.0) * 255).round().astype(np.uint8)[None]


@dataclass(frozen=True, kw_only=True)
class StableAudioWorkload(Workload):
    """A Stable Audio text-to-audio request; ``real`` swaps in the real-size components."""

    real: bool = False
    duration_s: float = 0.2
    steps: int = 3
    guidance: float = 7.0
    seed: int = 42

    def build_checkpoint(self, folder: Path) -> None:
        from omni_stable_audio.testing import build_tiny_stable_audio

        build_tiny_stable_audio(folder)
        if not self.real:
            return
        from diffusers import AutoencoderOobleck, StableAudioDiTModel, StableAudioProjectionModel
        from transformers import T5Config, T5EncoderModel

        t5 = {**T5Config.from_pretrained(folder / "text_encoder").to_dict(), **_T5_BASE}
        self.replace_with_random_model(
            folder / "text_encoder", T5EncoderModel, T5Config(**t5), seed=1
        )
        self.replace_with_random_model(
            folder / "projection_model", StableAudioProjectionModel, _PROJECTION, seed=2
        )
        transformer = {"num_layers": self.blocks(24)}
        self.replace_with_random_model(
            folder / "transformer", StableAudioDiTModel, transformer, seed=3
        )
        self.replace_with_random_model(folder / "vae", AutoencoderOobleck, {}, seed=4)

    def request(self) -> dict[str, Any]:
        return {
            "prompt": PROMPT,
            "negative_prompt": NEGATIVE,
            "duration_s": self.duration_s,
            "num_inference_steps": self.steps,
            "guidance_scale": self.guidance,
            "seed": self.seed,
        }

    def load_reference(self, folder: Path, device: Any, dtype: Any) -> Any:
        from diffusers import StableAudioPipeline

        return self.load_diffusers_pipeline(StableAudioPipeline, folder, device, dtype)

    def run_reference(self, reference: Any, request: dict[str, Any], on_step: Any = None) -> Any:
        """diffusers' Stable Audio takes the older ``callback(step, t, latents)`` per step."""
        import torch

        kwargs = {} if on_step is None else {"callback": lambda *_: on_step()}
        return reference(
            prompt=request["prompt"],
            negative_prompt=request["negative_prompt"],
            audio_end_in_s=request["duration_s"],
            num_inference_steps=request["num_inference_steps"],
            guidance_scale=request["guidance_scale"],
            generator=torch.Generator("cpu").manual_seed(request["seed"]),
            output_type="np",
            **kwargs,
        )

    def compile_reference(self, reference: Any, *, backend: str | None = None) -> None:
        """``StableAudioDiTModel`` names no repeated blocks for diffusers' regional compile, so
        each of its ``transformer_blocks`` is compiled the way that compile would."""
        kwargs = {"backend": backend} if backend else {}
        for block in reference.transformer.transformer_blocks:
            block.compile(fullgraph=True, **kwargs)

    def reference_frames(self, output: Any) -> np.ndarray:
        """diffusers' first clip (``[channels, samples]``) as :func:`pcm_levels`."""
        return pcm_levels(np.asarray(output["audios"][0], dtype=np.float32).T)

    def omni_frames(self, result: GenerationResult) -> np.ndarray:
        """omni's clip (``[samples, channels]``) as :func:`pcm_levels`."""
        return pcm_levels(result.audio if result.audio is not None else np.zeros((0, 2)))


STABLE_AUDIO_OPEN_10S = StableAudioWorkload(
    name="stable-audio-open-10s",
    description="Stable Audio Open 1.0 text to audio, 10 s of stereo 44.1 kHz, 100 steps, CFG 7: "
    "real-size DiT (24 blocks, ~1.1B), Oobleck VAE and T5-base, random bf16",
    real=True,
    duration_s=10.0,
    steps=100,
)

TINY = StableAudioWorkload(
    name="tiny-stable-audio",
    description="tiny Stable Audio layout (omni_stable_audio.testing), 0.2 s, 2 steps, CPU",
    steps=2,
    checkpoint_dtype="float32",
)
