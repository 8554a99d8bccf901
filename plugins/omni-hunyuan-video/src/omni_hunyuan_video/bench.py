"""Benchmark workloads of omni-hunyuan-video: HunyuanVideo-1.5 480p text to video, random weights.

Registered by :mod:`omni_hunyuan_video.plugin` (``omni bench pipeline --workload NAME``). The
folder is what :func:`omni_hunyuan_video.testing.build_tiny_hunyuan_video15` writes (layout,
tokenizers, the 480p scheduler's shift 5 and guider's scale 6); for the real-size workload the
transformer (54 double-stream blocks of 16 x 128 heads, ~8.3B) and the VAE (32 latent channels,
16x spatial, 4x temporal) are replaced by diffusers' class defaults (the published 480p_t2v
configuration), the Qwen2.5-VL-7B text model by 3 layers of its real width (HunyuanVideo reads
the third hidden state from the top, so its output has the real shape and meaning) and the ByT5
glyph encoder by byt5-small's real widths. Weights are random (seeded) bf16. The reference is
diffusers' ``HunyuanVideo15Pipeline`` from the same folder, with the same seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni_core.bench import Workload

PROMPT = "a red cat walks on the grass in the sun, a lighthouse at dusk behind it"
NEGATIVE = "blurry, low quality, watermark, text"
#: Qwen2.5-VL-7B-Instruct's text widths (the pipeline reads 3 layers from the top).
_QWEN_TEXT: dict[str, Any] = {
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 3,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "rope_parameters": {
        "rope_type": "default",
        "mrope_section": [16, 24, 24],
        "rope_theta": 1000000.0,
    },
}
#: google/byt5-small's encoder widths (the glyph branch; it runs on quoted text only).
_BYT5: dict[str, Any] = {"d_model": 1472, "d_kv": 64, "d_ff": 3584, "num_heads": 6}
#: The published 480p text-to-video transformer: diffusers' defaults but for the task.
_TRANSFORMER: dict[str, Any] = {"task_type": "t2v", "target_size": 640}


@dataclass(frozen=True, kw_only=True)
class HunyuanVideoWorkload(Workload):
    """A HunyuanVideo-1.5 text-to-video request; ``real`` swaps in the real-size components."""

    real: bool = False
    height: int = 32
    width: int = 32
    num_frames: int = 5
    steps: int = 2
    guidance: float = 6.0
    seed: int = 42
    extras: dict[str, Any] = field(default_factory=dict)

    def build_checkpoint(self, folder: Path) -> None:
        from omni_hunyuan_video.testing import build_tiny_hunyuan_video15

        build_tiny_hunyuan_video15(folder)
        if not self.real:
            return
        from diffusers import AutoencoderKLHunyuanVideo15, HunyuanVideo15Transformer3DModel
        from transformers import (
            Qwen2_5_VLTextConfig,
            Qwen2_5_VLTextModel,
            T5Config,
            T5EncoderModel,
        )

        qwen = Qwen2_5_VLTextConfig.from_pretrained(folder / "text_encoder").to_dict()
        qwen.pop("layer_types", None)  # the tiny's per-layer list: rebuilt for the new depth
        qwen.update(_QWEN_TEXT)
        self.replace_with_random_model(
            folder / "text_encoder", Qwen2_5_VLTextModel, Qwen2_5_VLTextConfig(**qwen), seed=1
        )
        byt5 = {**T5Config.from_pretrained(folder / "text_encoder_2").to_dict(), **_BYT5}
        self.replace_with_random_model(
            folder / "text_encoder_2", T5EncoderModel, T5Config(**byt5), seed=2
        )
        transformer = {**_TRANSFORMER, "num_layers": self.blocks(54)}
        self.replace_with_random_model(
            folder / "transformer", HunyuanVideo15Transformer3DModel, transformer, seed=3
        )
        self.replace_with_random_model(folder / "vae", AutoencoderKLHunyuanVideo15, {}, seed=4)

    def request(self) -> dict[str, Any]:
        return {
            "prompt": PROMPT,
            "negative_prompt": NEGATIVE,
            "height": self.height,
            "width": self.width,
            "num_frames": self.num_frames,
            "num_inference_steps": self.steps,
            "guidance_scale": self.guidance,
            "seed": self.seed,
            "extras": dict(self.extras),
        }

    def load_reference(self, folder: Path, device: Any, dtype: Any) -> Any:
        from diffusers import HunyuanVideo15Pipeline

        return self.load_diffusers_pipeline(HunyuanVideo15Pipeline, folder, device, dtype)

    def run_reference(self, reference: Any, request: dict[str, Any], on_step: Any = None) -> Any:
        """diffusers takes the CFG scale from its guider (no ``guidance_scale`` argument), so
        the guider is set to the request's scale. Its pipeline takes no step callback either:
        ``on_step`` follows each scheduler step instead (one per denoising step, after the
        step's transformer forwards)."""
        import torch
        from diffusers import ClassifierFreeGuidance

        reference.guider = ClassifierFreeGuidance(guidance_scale=request["guidance_scale"])
        scheduler = reference.scheduler
        if on_step is not None:
            plain = scheduler.step

            def step(*args: Any, **kwargs: Any) -> Any:
                out = plain(*args, **kwargs)
                on_step()
                return out

            scheduler.step = step
        try:
            return reference(
                prompt=request["prompt"],
                negative_prompt=request["negative_prompt"],
                height=request["height"],
                width=request["width"],
                num_frames=request["num_frames"],
                num_inference_steps=request["num_inference_steps"],
                generator=torch.Generator("cpu").manual_seed(request["seed"]),
                output_type="np",
            )
        finally:
            scheduler.__dict__.pop("step", None)  # the class's own step again


HUNYUAN_VIDEO_480P = HunyuanVideoWorkload(
    name="hunyuan-video-1.5-480p-33f",
    description="HunyuanVideo-1.5 text to video, 480x848, 33 frames, 20 steps, CFG 6: real-size "
    "transformer (54 blocks, ~8.3B) and VAE, 3-layer Qwen2.5-VL-7B of the real width, random "
    "bf16",
    real=True,
    height=480,
    width=848,
    num_frames=33,
    steps=20,
)

TINY = HunyuanVideoWorkload(
    name="tiny-hunyuan-video-1.5",
    description="tiny HunyuanVideo-1.5 layout (omni_hunyuan_video.testing), 32x32x5, 2 steps, CPU",
    checkpoint_dtype="float32",
)
