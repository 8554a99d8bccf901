"""Benchmark workloads of omni-qwen: a real-layout Qwen-Image checkpoint, random weights.

Registered by :mod:`omni_qwen.plugin` (``omni bench pipeline --workload NAME``). The folder is
the one :func:`omni_qwen.testing.build_tiny_qwen_image` writes (layout, tokenizer, the real
scheduler config), with the transformer and the VAE replaced by real-size ones and the text
encoder by a Qwen2.5-VL of the real text width (3584) with one decoder layer and a minimal
vision tower (text-to-image never runs it). Weights are random (seeded) bf16. The reference is
diffusers' ``QwenImagePipeline`` from the same folder, with true CFG and the same negative prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni_core.bench import Workload

#: Qwen-Image's transformer (20B parameters at 60 blocks).
_TRANSFORMER: dict[str, Any] = {
    "patch_size": 2,
    "in_channels": 64,
    "out_channels": 16,
    "num_layers": 60,
    "attention_head_dim": 128,
    "num_attention_heads": 24,
    "joint_attention_dim": 3584,
    "guidance_embeds": False,
    "axes_dims_rope": (16, 56, 56),
}
#: Qwen2.5-VL-7B's text widths, one layer.
_TEXT: dict[str, Any] = {
    "vocab_size": 152064,
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 1,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "max_position_embeddings": 128000,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 1000000.0,
        "mrope_section": [16, 24, 24],
    },
}
PROMPT = "a red cat sitting on a mat in the sun, make it blue and add a hat"
NEGATIVE = "blurry, low quality, watermark, text"


@dataclass(frozen=True, kw_only=True)
class QwenImageWorkload(Workload):
    """A Qwen-Image text-to-image request with true CFG (``guidance`` > 1 and a negative).

    ``real_size=False`` keeps the tiny builder's components (:data:`TINY`).
    """

    real_size: bool = True
    height: int = 1024
    width: int = 1024
    steps: int = 50
    guidance: float = 4.0
    seed: int = 42
    prompt: str = PROMPT
    negative_prompt: str = NEGATIVE
    extras: dict[str, Any] = field(default_factory=dict)

    def build_checkpoint(self, folder: Path) -> None:
        from omni_qwen.testing import build_tiny_qwen_image

        build_tiny_qwen_image(folder, "t2i")
        if not self.real_size:
            return
        from diffusers import AutoencoderKLQwenImage, QwenImageTransformer2DModel
        from transformers import Qwen2_5_VLForConditionalGeneration

        transformer = {**_TRANSFORMER, "num_layers": self.blocks(_TRANSFORMER["num_layers"])}
        self.replace_with_random_model(
            folder / "transformer", QwenImageTransformer2DModel, transformer, seed=10
        )
        self.replace_with_random_model(
            folder / "vae", AutoencoderKLQwenImage, {}, seed=2
        )  # the real defaults
        config = _text_encoder_config(folder / "text_encoder")
        self.replace_with_random_model(
            folder / "text_encoder", Qwen2_5_VLForConditionalGeneration, config, seed=1
        )
        _write_real_scheduler(folder / "scheduler")

    def request(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "negative_prompt": self.negative_prompt,
            "height": self.height,
            "width": self.width,
            "num_inference_steps": self.steps,
            "guidance_scale": self.guidance,
            "seed": self.seed,
            **self.extras,
        }

    def load_reference(self, folder: Path, device: Any, dtype: Any) -> Any:
        from diffusers import QwenImagePipeline

        return self.load_diffusers_pipeline(QwenImagePipeline, folder, device, dtype)

    def run_reference(self, reference: Any, request: dict[str, Any], on_step: Any = None) -> Any:
        import torch

        kwargs = {} if on_step is None else {"callback_on_step_end": self.step_callback(on_step)}
        return reference(
            prompt=request["prompt"],
            negative_prompt=request["negative_prompt"],
            height=request["height"],
            width=request["width"],
            num_inference_steps=request["num_inference_steps"],
            true_cfg_scale=request["guidance_scale"],
            generator=torch.Generator("cpu").manual_seed(request["seed"]),
            output_type="np",
            **kwargs,
        )


def _write_real_scheduler(folder: Path) -> None:
    """Qwen-Image's own resolution shift (256 to 8192 image tokens). The tiny builder's runs
    from 4 to 64 tokens: at 1024x1024 (4096 tokens) it extrapolates to a shift of ~28, every
    sigma rounds to 1, the terminal stretch divides by zero and the whole run is NaN (a black
    image in every mode, so no PSNR could be measured)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    FlowMatchEulerDiscreteScheduler.from_config(
        FlowMatchEulerDiscreteScheduler.load_config(folder),
        base_image_seq_len=256,
        max_image_seq_len=8192,
    ).save_pretrained(folder)


def _text_encoder_config(tiny: Path) -> Any:
    """The tiny encoder's config (token ids of the tiny tokenizer) at the real text widths."""
    from transformers import Qwen2_5_VLConfig

    config = Qwen2_5_VLConfig.from_pretrained(tiny).to_dict()
    tokens = ("bos_token_id", "eos_token_id", "pad_token_id")
    text = {**{k: config["text_config"][k] for k in tokens}, **_TEXT}
    vision = {
        **config["vision_config"],
        "depth": 1,
        "fullatt_block_indexes": [0],
        "out_hidden_size": _TEXT["hidden_size"],
    }
    ids = {
        k: config[k]
        for k in (
            "image_token_id",
            "video_token_id",
            "vision_start_token_id",
            "vision_end_token_id",
        )
        if k in config
    }
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **ids)


QWEN_IMAGE_1024 = QwenImageWorkload(
    name="qwen-image-1024",
    description="Qwen-Image 1024x1024, 50 steps, true CFG 4 with a negative prompt: real-size "
    "transformer (60 blocks, ~20B) and VAE, 1-layer Qwen2.5-VL of the real width, random bf16",
)

TINY = QwenImageWorkload(
    name="tiny-qwen",
    description="tiny Qwen-Image layout (omni_qwen.testing), 64x64, 2 steps, true CFG 4, CPU",
    checkpoint_dtype="float32",
    real_size=False,
    height=64,
    width=64,
    steps=2,
    guidance=4.0,
)
