"""Benchmark workloads of omni-zimage: a Z-Image-Turbo checkpoint in the official layout, random
weights.

Registered by :mod:`omni_zimage.plugin` (``omni bench pipeline --workload NAME``). The folder is
the one :func:`omni_zimage.testing.build_tiny_zimage` writes (layout, tokenizer, Turbo's
scheduler config), with the transformer and the VAE replaced by real-size ones (Z-Image's 6B
transformer: 2 + 2 refiner and 30 main blocks of width 3840; FLUX's 16-channel VAE) and the
text encoder by a Qwen3-4B of the real width with two layers (the prompt costs little next to
the denoising steps; its output has the real shape). Weights are random (seeded) bf16. The
reference is diffusers' ``ZImagePipeline`` from the same folder, with the same seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni_core.bench import Workload

#: Z-Image(-Turbo)'s transformer (~6B parameters), as its config.json publishes it.
_TRANSFORMER: dict[str, Any] = {
    "in_channels": 16,
    "dim": 3840,
    "n_layers": 30,
    "n_refiner_layers": 2,
    "n_heads": 30,
    "n_kv_heads": 30,
    "cap_feat_dim": 2560,
    "axes_dims": [32, 48, 48],
    "axes_lens": [1536, 512, 512],
}
#: FLUX.1's VAE, which Z-Image uses (diffusers' AutoencoderKL, 16 latent channels).
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
class ZImageWorkload(Workload):
    """A Z-Image text-to-image request (Turbo's 9 steps without CFG by default).

    ``real_size=False`` keeps the tiny builder's components (:data:`TINY`).
    """

    real_size: bool = True
    height: int = 1024
    width: int = 1024
    steps: int = 9
    guidance: float = 0.0
    seed: int = 42
    prompt: str = PROMPT
    extras: dict[str, Any] = field(default_factory=dict)

    def build_checkpoint(self, folder: Path) -> None:
        from omni_zimage.testing import build_tiny_zimage

        build_tiny_zimage(folder)
        if not self.real_size:
            return
        from diffusers import AutoencoderKL, ZImageTransformer2DModel
        from transformers import Qwen3Config, Qwen3Model

        transformer = {**_TRANSFORMER, "n_layers": self.blocks(_TRANSFORMER["n_layers"])}
        self.replace_with_random_model(
            folder / "transformer", ZImageTransformer2DModel, transformer, seed=10
        )
        self.replace_with_random_model(folder / "vae", AutoencoderKL, _VAE, seed=2)
        qwen = Qwen3Config.from_pretrained(folder / "text_encoder").to_dict()
        qwen.pop("layer_types", None)  # the tiny's per-layer list: rebuilt for 2 layers
        qwen.update(
            hidden_size=2560,
            intermediate_size=9728,
            num_hidden_layers=2,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
        )
        self.replace_with_random_model(
            folder / "text_encoder", Qwen3Model, Qwen3Config(**qwen), seed=1
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
        from diffusers import ZImagePipeline

        return self.load_diffusers_pipeline(ZImagePipeline, folder, device, dtype)

    def run_reference(self, reference: Any, request: dict[str, Any], on_step: Any = None) -> Any:
        import torch

        kwargs = {} if on_step is None else {"callback_on_step_end": self.step_callback(on_step)}
        names = ("max_sequence_length", "cfg_normalization", "cfg_truncation")
        extras = {k: v for k, v in request.items() if k in names}
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


Z_IMAGE_TURBO_1024 = ZImageWorkload(
    name="z-image-turbo-1024",
    description="Z-Image-Turbo 1024x1024, 9 steps, no CFG: real-size transformer (2 + 2 + 30 "
    "blocks, ~6B) and VAE, 2-layer Qwen3-4B of the real width, random bf16",
)

TINY = ZImageWorkload(
    name="tiny-z-image",
    description="tiny Z-Image layout (omni_zimage.testing), 64x64, 2 steps, CPU",
    checkpoint_dtype="float32",
    real_size=False,
    height=64,
    width=64,
    steps=2,
    extras={"max_sequence_length": 64},
)
