"""Benchmark workloads of omni-flux: a FLUX.1-dev checkpoint in the official layout, random weights.

Registered by :mod:`omni_flux.plugin` (``omni bench pipeline --workload NAME``). The folder is
the one :func:`omni_flux.testing.build_tiny_flux` writes (layout, tokenizers, the real
scheduler config), with the transformer and the VAE replaced by real-size ones (FLUX.1-dev's
12B transformer: 19 double- and 38 single-stream blocks; its 16-channel VAE) and the text
encoders by CLIP-L and T5-XXL of the real widths with one layer each (the prompt costs little
next to 28 denoising steps; their outputs have the real shapes: 768 pooled, 512 x 4096).
Weights are random (seeded) bf16. The reference is diffusers' ``FluxPipeline`` from the same
folder, with the same embedded guidance and seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni_core.bench import Workload

#: FLUX.1-dev's transformer (12B parameters).
_TRANSFORMER: dict[str, Any] = {
    "patch_size": 1,
    "in_channels": 64,
    "num_layers": 19,
    "num_single_layers": 38,
    "attention_head_dim": 128,
    "num_attention_heads": 24,
    "joint_attention_dim": 4096,
    "pooled_projection_dim": 768,
    "guidance_embeds": True,
    "axes_dims_rope": (16, 56, 56),
}
#: FLUX.1's VAE (diffusers' AutoencoderKL with 16 latent channels and no quant convs).
_VAE: dict[str, Any] = {
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ("DownEncoderBlock2D",) * 4,
    "up_block_types": ("UpDecoderBlock2D",) * 4,
    "block_out_channels": (128, 256, 512, 512),
    "layers_per_block": 2,
    "latent_channels": 16,
    "norm_num_groups": 32,
    "sample_size": 1024,
    "scaling_factor": 0.3611,
    "shift_factor": 0.1159,
    "use_quant_conv": False,
    "use_post_quant_conv": False,
}
PROMPT = "a red cat sitting on a mat in the sun, a lighthouse at dusk behind it"


@dataclass(frozen=True, kw_only=True)
class FluxWorkload(Workload):
    """A FLUX.1-dev text-to-image request (embedded guidance, no true CFG by default).

    ``real_size=False`` keeps the tiny builder's components (:data:`TINY`).
    """

    real_size: bool = True
    height: int = 1024
    width: int = 1024
    steps: int = 28
    guidance: float = 3.5
    seed: int = 42
    prompt: str = PROMPT
    extras: dict[str, Any] = field(default_factory=dict)

    def build_checkpoint(self, folder: Path) -> None:
        from omni_flux.testing import build_tiny_flux

        build_tiny_flux(folder, "dev")
        if not self.real_size:
            return
        from diffusers import AutoencoderKL, FluxTransformer2DModel
        from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

        transformer = {
            **_TRANSFORMER,
            "num_layers": self.blocks(_TRANSFORMER["num_layers"]),
            "num_single_layers": self.blocks(_TRANSFORMER["num_single_layers"]),
        }
        self.replace_with_random_model(
            folder / "transformer", FluxTransformer2DModel, transformer, seed=10
        )
        self.replace_with_random_model(folder / "vae", AutoencoderKL, _VAE, seed=2)
        clip = CLIPTextConfig.from_pretrained(folder / "text_encoder").to_dict()
        clip.update(
            hidden_size=768,
            intermediate_size=3072,
            num_hidden_layers=1,
            num_attention_heads=12,
            projection_dim=768,
        )
        self.replace_with_random_model(
            folder / "text_encoder", CLIPTextModel, CLIPTextConfig(**clip), seed=1
        )
        t5 = T5Config.from_pretrained(folder / "text_encoder_2").to_dict()
        t5.update(d_model=4096, d_kv=64, d_ff=10240, num_layers=1, num_heads=64)
        t5["relative_attention_num_buckets"] = 32
        self.replace_with_random_model(
            folder / "text_encoder_2", T5EncoderModel, T5Config(**t5), seed=3
        )

    def request(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "height": self.height,
            "width": self.width,
            "num_inference_steps": self.steps,
            "guidance_scale": self.guidance,
            "seed": self.seed,
            **self.extras,
        }

    def load_reference(self, folder: Path, device: Any, dtype: Any) -> Any:
        from diffusers import FluxPipeline

        return self.load_diffusers_pipeline(FluxPipeline, folder, device, dtype)

    def run_reference(self, reference: Any, request: dict[str, Any], on_step: Any = None) -> Any:
        import torch

        kwargs = {} if on_step is None else {"callback_on_step_end": self.step_callback(on_step)}
        extras = {
            k: v for k, v in request.items() if k in ("true_cfg_scale", "max_sequence_length")
        }
        return reference(
            prompt=request["prompt"],
            negative_prompt=request.get("negative_prompt"),
            height=request["height"],
            width=request["width"],
            num_inference_steps=request["num_inference_steps"],
            guidance_scale=request["guidance_scale"],
            generator=torch.Generator("cpu").manual_seed(request["seed"]),
            output_type="np",
            **extras,
            **kwargs,
        )


FLUX1_DEV_1024 = FluxWorkload(
    name="flux1-dev-1024",
    description="FLUX.1-dev 1024x1024, 28 steps, embedded guidance 3.5: real-size transformer "
    "(19 + 38 blocks, ~12B) and VAE, 1-layer CLIP-L and T5-XXL of the real widths, random bf16",
)

TINY = FluxWorkload(
    name="tiny-flux",
    description="tiny FLUX.1-dev layout (omni_flux.testing), 64x64, 2 steps, CPU",
    checkpoint_dtype="float32",
    real_size=False,
    height=64,
    width=64,
    steps=2,
    extras={"max_sequence_length": 32},
)
