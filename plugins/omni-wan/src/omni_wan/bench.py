"""Benchmark workloads of omni-wan: real-layout Wan checkpoints, random weights, one request.

Registered by :mod:`omni_wan.plugin` (``omni bench pipeline --workload NAME``). Each folder is
what ``save_pretrained`` of diffusers' ``WanPipeline`` writes: the layout, tokenizer and scheduler
come from :func:`omni_wan.testing.build_tiny_wan`, then the transformer and the VAE are replaced
by real-size ones and the text encoder by a UMT5 of the real width (4096) with one layer (its
cost is a small share of a request; its output width is what the transformer sees). Weights are
random (seeded) bf16. The reference is diffusers' ``WanPipeline`` from the same folder, with the
VAE in float32 as omni keeps it (and as diffusers' Wan docs recommend).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni_core.bench import Workload
from omni_core.diffusion import dtype_kwargs

#: Shared by every Wan transformer size (diffusers' WanTransformer3DModel keywords).
_TRANSFORMER: dict[str, Any] = {
    "patch_size": (1, 2, 2),
    "attention_head_dim": 128,
    "text_dim": 4096,
    "freq_dim": 256,
    "cross_attn_norm": True,
    "qk_norm": "rms_norm_across_heads",
    "eps": 1e-6,
    "rope_max_seq_len": 1024,
}
#: Wan2.2's 48-channel residual VAE (16x spatial, patchified); Wan2.1's is the class default.
_VAE_2_2: dict[str, Any] = {
    "base_dim": 160,
    "decoder_base_dim": 256,
    "z_dim": 48,
    "is_residual": True,
    "in_channels": 12,
    "out_channels": 12,
    "patch_size": 2,
    "scale_factor_spatial": 16,
    "scale_factor_temporal": 4,
    "latents_mean": [0.0] * 48,
    "latents_std": [1.0] * 48,
}
#: UMT5-XXL's encoder widths with one layer; pad/eos ids match the tiny tokenizer.
_TEXT_ENCODER: dict[str, Any] = {
    "vocab_size": 256384,
    "d_model": 4096,
    "d_kv": 64,
    "d_ff": 10240,
    "num_layers": 1,
    "num_heads": 64,
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
    "feed_forward_proj": "gated-gelu",
    "dropout_rate": 0.0,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "decoder_start_token_id": 0,
}
PROMPT = "a cat walks on the grass in the sun, close up, spring rain"
NEGATIVE = "blurry, low quality, static, watermark, text"


@dataclass(frozen=True, kw_only=True)
class WanWorkload(Workload):
    """A Wan text-to-video request on a checkpoint of ``variant``'s layout.

    ``transformer`` / ``vae``: real-size configs that replace the tiny ones (None keeps the tiny
    builder's, as :data:`TINY` does); ``num_layers`` of the transformer honours ``layers``.
    """

    variant: str = "ti2v"
    transformer: dict[str, Any] | None = None
    vae: dict[str, Any] | None = None
    text_encoder: dict[str, Any] | None = None
    height: int = 32
    width: int = 64
    num_frames: int = 9
    steps: int = 2
    guidance: float = 5.0
    seed: int = 42
    prompt: str = PROMPT
    negative_prompt: str = NEGATIVE
    extras: dict[str, Any] = field(default_factory=dict)

    def build_checkpoint(self, folder: Path) -> None:
        from omni_wan.testing import build_tiny_wan

        build_tiny_wan(folder, self.variant)
        if self.transformer is not None:
            from diffusers import WanTransformer3DModel

            config = {**self.transformer, "num_layers": self.blocks(self.transformer["num_layers"])}
            self.replace_with_random_model(
                folder / "transformer", WanTransformer3DModel, config, seed=10
            )
        if self.vae is not None:
            from diffusers import AutoencoderKLWan

            self.replace_with_random_model(folder / "vae", AutoencoderKLWan, dict(self.vae), seed=2)
        if self.text_encoder is not None:
            from transformers import UMT5Config, UMT5EncoderModel

            config = UMT5Config(**self.text_encoder)
            self.replace_with_random_model(
                folder / "text_encoder", UMT5EncoderModel, config, seed=1
            )

    def request(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "negative_prompt": self.negative_prompt,
            "height": self.height,
            "width": self.width,
            "num_frames": self.num_frames,
            "num_inference_steps": self.steps,
            "guidance_scale": self.guidance,
            "seed": self.seed,
            **self.extras,
        }

    def load_reference(self, folder: Path, device: Any, dtype: Any) -> Any:
        import torch
        from diffusers import AutoencoderKLWan, WanPipeline

        vae = AutoencoderKLWan.from_pretrained(folder / "vae", **dtype_kwargs(torch.float32))
        return self.load_diffusers_pipeline(WanPipeline, folder, device, dtype, vae=vae)

    def run_reference(self, reference: Any, request: dict[str, Any], on_step: Any = None) -> Any:
        import torch

        kwargs = {} if on_step is None else {"callback_on_step_end": self.step_callback(on_step)}
        return reference(
            prompt=request["prompt"],
            negative_prompt=request["negative_prompt"],
            height=request["height"],
            width=request["width"],
            num_frames=request["num_frames"],
            num_inference_steps=request["num_inference_steps"],
            guidance_scale=request["guidance_scale"],
            generator=torch.Generator("cpu").manual_seed(request["seed"]),
            output_type="np",
            **kwargs,
        )


TI2V_5B_720P = WanWorkload(
    name="wan2.2-ti2v-5b-704x1280x121",
    description="Wan2.2-TI2V-5B text-to-video, 704x1280x121, 20 steps, CFG 5: real-size "
    "transformer (30 blocks) and 48-channel VAE, 1-layer UMT5 of the real width, random bf16",
    variant="ti2v",
    transformer={
        **_TRANSFORMER,
        "num_attention_heads": 24,
        "in_channels": 48,
        "out_channels": 48,
        "ffn_dim": 14336,
        "num_layers": 30,
    },
    vae=_VAE_2_2,
    text_encoder=_TEXT_ENCODER,
    height=704,
    width=1280,
    num_frames=121,
    steps=20,
    guidance=5.0,
)

T2V_14B_480P = WanWorkload(
    name="wan2.1-t2v-14b-480x832x81",
    description="Wan2.1-T2V-14B, 480x832x81, 50 steps, CFG 5: real-size transformer (40 "
    "blocks) and VAE, 1-layer UMT5 of the real width, random bf16",
    variant="t2v",
    transformer={
        **_TRANSFORMER,
        "num_attention_heads": 40,
        "in_channels": 16,
        "out_channels": 16,
        "ffn_dim": 13824,
        "num_layers": 40,
    },
    vae={},
    text_encoder=_TEXT_ENCODER,
    height=480,
    width=832,
    num_frames=81,
    steps=50,
    guidance=5.0,
)

TINY = WanWorkload(
    name="tiny-wan",
    description="tiny Wan2.2-TI2V layout (omni_wan.testing), 32x64x9, 2 steps, CFG 5, CPU",
    checkpoint_dtype="float32",
    variant="ti2v",
    height=32,
    width=64,
    num_frames=9,
    steps=2,
    guidance=5.0,
)
