"""omni-acme-warmup: a tiny third-party image plugin whose model declares its own warm-up, written
the way an outside author would (only ``omni_core`` faces, numpy).

The model paints a flat image in a palette colour and needs at least ``min_steps`` denoising
steps (its ``config.json`` says how many), so the default warm-up (one step) would be refused:
it overrides :meth:`~omni_core.Pipeline.warmup_fields` with its minimum, a prompt and a palette
extra. A checkpoint with ``"warmup": "one step"`` declares a warm-up its own ``validate``
refuses (a plugin bug the server must report in one line). Every request that reaches
``prepare`` is kept in :attr:`AcmeWarmupPipeline.prepared`, so a test sees what the server sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from pydantic import BaseModel, ConfigDict

from omni_core import (
    PLUGIN_API_VERSION,
    GenerationRequest,
    GenerationResult,
    InvalidRequestError,
    PipelineOptions,
    PipelineSpec,
    hookimpl,
)
from omni_core.diffusion import DenoiseState, StagedPipeline

OMNI_PLUGIN_API = PLUGIN_API_VERSION
ARCH = "AcmeWarmupPainter"
PALETTE = {"warm": (200, 120, 40), "cool": (40, 120, 200)}


class AcmeWarmupExtras(BaseModel):
    model_config = ConfigDict(extra="forbid")

    palette: str = "cool"


class AcmeWarmupPipeline(StagedPipeline):
    extras_model = AcmeWarmupExtras

    def __init__(self, config: dict[str, Any]) -> None:
        self.min_steps = int(config["min_steps"])
        self.declares = config.get("warmup", "its minimum")
        self.prepared: list[GenerationRequest] = []

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> AcmeWarmupPipeline:
        return cls(json.loads((path / "config.json").read_text()))

    def warmup_fields(self) -> dict[str, Any]:
        steps = 1 if self.declares == "one step" else self.min_steps
        return {"prompt": "acme warm-up", "num_inference_steps": steps, "palette": "warm"}

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        request = super().validate(request)
        steps = request.num_inference_steps or self.min_steps
        if steps < self.min_steps:
            raise InvalidRequestError(
                f"num_inference_steps={steps}: the acme painter needs at least "
                f"{self.min_steps} steps",
                param="num_inference_steps",
            )
        if request.extras["palette"] not in PALETTE:
            raise InvalidRequestError(
                f"palette: one of {', '.join(PALETTE)}, not {request.extras['palette']!r}",
                param="palette",
            )
        return request.model_copy(
            update={
                "num_inference_steps": steps,
                "width": request.width or 16,
                "height": request.height or 16,
            }
        )

    def prepare(self, request: GenerationRequest) -> DenoiseState:
        self.prepared.append(request)
        return DenoiseState(request=request, num_steps=request.num_inference_steps or 1)

    def step(self, states: list[DenoiseState]) -> None:
        for state in states:
            state.step_index += 1

    def decode(self, state: DenoiseState) -> GenerationResult:
        request = state.request
        colour = PALETTE[request.extras["palette"]]
        pixels = np.full((request.height, request.width, 3), colour, np.uint8)
        return GenerationResult(images=[Image.fromarray(pixels)])


def build_tiny_checkpoint(path: Path, *, min_steps: int = 3, warmup: str = "its minimum") -> Path:
    """A checkpoint folder of the painter (``warmup="one step"``: the broken declaration)."""
    path.mkdir(parents=True, exist_ok=True)
    config = {"architectures": [ARCH], "min_steps": min_steps, "warmup": warmup}
    (path / "config.json").write_text(json.dumps(config))
    return path


class AcmeWarmupPlugin:
    @hookimpl
    def omni_register_pipelines(self, register: Callable[[PipelineSpec], None]) -> None:
        register(
            PipelineSpec(
                name="acme-warmup",
                implementation=f"{__name__}:AcmeWarmupPipeline",
                tasks=("t2i",),
                architectures=(ARCH,),
                description="A flat-colour painter that needs a few steps (its own warm-up).",
            )
        )
