"""Wan's own request knobs (the ``extras`` of a request): imported without torch."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class WanExtras(BaseModel):
    """Model-specific options of the Wan pipelines; anything else in ``extras`` is an error."""

    model_config = ConfigDict(extra="forbid")

    guidance_scale_2: float | None = Field(
        None,
        ge=0.0,
        le=100.0,
        description="Wan2.2 A14B: guidance of the low-noise expert (default: guidance_scale).",
    )
    boundary_ratio: float | None = Field(
        None,
        gt=0.0,
        lt=1.0,
        description="Wan2.2 A14B: fraction of the 1000 training timesteps above which the "
        "high-noise expert runs (default: the checkpoint's model_index.json value).",
    )
    flow_shift: float | None = Field(
        None,
        ge=0.001,  # below ~1e-6 the scheduler's sigmas underflow: NaN, not a video
        le=100.0,
        description="Override the scheduler's flow shift (Wan: 3.0 for 480p, 5.0 for 720p).",
    )
    max_sequence_length: int = Field(
        512, ge=1, le=512, description="T5 tokens kept from the prompt (diffusers' default)."
    )
    fps: int | None = Field(
        None, ge=1, le=120, description="Frame rate written to MP4 (default 16; 24 for TI2V)."
    )
