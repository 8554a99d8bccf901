"""Benchmark workloads of omni-ltx: the LTX-2 layout with random weights, one request.

Registered by :mod:`omni_ltx.plugin` (``omni bench pipeline --workload NAME``). Each folder is
what ``save_pretrained`` of diffusers' ``LTX2Pipeline`` writes: the tokenizer, scheduler and
index come from :func:`omni_ltx.testing.build_tiny_ltx2`; for the real-size workload the
transformer, both VAEs, the vocoder and the connectors are replaced by diffusers' class
defaults (which are LTX-2.0's 19B configuration) and Gemma 3 by one decoder layer of its real
width (3840; its cost is a small share of a request, its output width is what the
connectors see). Weights are random (seeded) bf16. The reference is diffusers'
``LTX2Pipeline`` from the same folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni_core.bench import Workload

PROMPT = "a cat walks on the grass in the sun, birds sing, a light breeze in the leaves"
NEGATIVE = "blurry, low quality, static, watermark, text"
#: Gemma-3-12B's text widths with one layer (the connectors read layers + 1 hidden states).
_GEMMA_TEXT: dict[str, Any] = {
    "hidden_size": 3840,
    "intermediate_size": 15360,
    "num_hidden_layers": 1,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 256,
}


@dataclass(frozen=True, kw_only=True)
class LTXWorkload(Workload):
    """An LTX-2 text-to-video request; ``real`` swaps in the real-size components."""

    real: bool = False
    height: int = 32
    width: int = 32
    num_frames: int = 5
    steps: int = 2
    guidance: float = 3.0
    seed: int = 42
    extras: dict[str, Any] = field(default_factory=dict)

    def build_checkpoint(self, folder: Path) -> None:
        from omni_ltx.testing import build_tiny_ltx2

        build_tiny_ltx2(folder)
        if not self.real:
            return
        from diffusers import (
            AutoencoderKLLTX2Audio,
            AutoencoderKLLTX2Video,
            LTX2VideoTransformer3DModel,
        )
        from diffusers.pipelines.ltx2 import LTX2TextConnectors
        from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder
        from transformers import Gemma3Config, Gemma3ForConditionalGeneration

        index = json.loads((folder / "text_encoder" / "config.json").read_text())
        text = {**index["text_config"], **_GEMMA_TEXT}
        text.pop("layer_types", None)  # the tiny's per-layer list: rebuilt for the new depth
        config = Gemma3Config(text_config=text, vision_config=index["vision_config"])
        self.replace_with_random_model(
            folder / "text_encoder", Gemma3ForConditionalGeneration, config, seed=1
        )
        layers = self.blocks(48)
        connectors = {"text_proj_in_factor": _GEMMA_TEXT["num_hidden_layers"] + 1}
        self.replace_with_random_model(
            folder / "connectors", LTX2TextConnectors, connectors, seed=2
        )
        self.replace_with_random_model(
            folder / "transformer", LTX2VideoTransformer3DModel, {"num_layers": layers}, seed=3
        )
        self.replace_with_random_model(folder / "vae", AutoencoderKLLTX2Video, {}, seed=4)
        self.replace_with_random_model(folder / "audio_vae", AutoencoderKLLTX2Audio, {}, seed=5)
        self.replace_with_random_model(folder / "vocoder", LTX2Vocoder, {}, seed=6)

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
        from diffusers import LTX2Pipeline

        return self.load_diffusers_pipeline(LTX2Pipeline, folder, device, dtype)

    def run_reference(self, reference: Any, request: dict[str, Any], on_step: Any = None) -> Any:
        import torch

        kwargs = {} if on_step is None else {"callback_on_step_end": self.step_callback(on_step)}
        extras = request.get("extras", {})
        return reference(
            prompt=request["prompt"],
            negative_prompt=request["negative_prompt"],
            height=request["height"],
            width=request["width"],
            num_frames=request["num_frames"],
            frame_rate=float(extras.get("fps", 24)),
            num_inference_steps=request["num_inference_steps"],
            guidance_scale=request["guidance_scale"],
            generator=torch.Generator("cpu").manual_seed(request["seed"]),
            output_type="np",
            **kwargs,
        )


LTX2_512P = LTXWorkload(
    name="ltx-2-512x768x121",
    description="LTX-2 text to video with sound, 512x768, 121 frames at 24 fps, 30 steps, "
    "diffusers' default guidance: real-size transformer (48 blocks), VAEs and vocoder, 1-layer "
    "Gemma 3 of the real width, random bf16",
    real=True,
    height=512,
    width=768,
    num_frames=121,
    steps=30,
)

LTX2_512P_SHORT = LTXWorkload(
    name="ltx-2-512x768x49",
    description="LTX-2 text to video with sound, 512x768, 49 frames (2 s at 24 fps), 30 steps, "
    "diffusers' default guidance: the real-size components of ltx-2-512x768x121 (a short clip: "
    "its three modes fit one 10-minute run on one H200)",
    real=True,
    height=512,
    width=768,
    num_frames=49,
    steps=30,
)

TINY = LTXWorkload(
    name="tiny-ltx-2",
    description="tiny LTX-2 layout (omni_ltx.testing), 32x32x5, 2 steps, CPU",
    checkpoint_dtype="float32",
)
