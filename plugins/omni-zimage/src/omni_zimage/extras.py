"""Request extras of the Z-Image pipeline: the knobs diffusers' ``ZImagePipeline`` has beyond the
shared request (``guidance_scale`` is its classifier-free guidance scale; 0 turns CFG off, as
Z-Image-Turbo runs)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ZImageExtras(BaseModel):
    """Z-Image's own request options (text to image)."""

    model_config = ConfigDict(extra="forbid")

    cfg_normalization: float = Field(
        0.0,
        ge=0.0,
        le=100.0,
        description="Cap the guided prediction's norm at this multiple of the conditional one's "
        "(diffusers' cfg_normalization; 0 leaves it uncapped).",
    )
    cfg_truncation: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="Stop CFG once the normalised time (1000 - t) / 1000 passes this (the later "
        "steps then run the conditional branch only); 1 keeps it for every step.",
    )
    max_sequence_length: int = Field(
        512, ge=1, le=1024, description="Text tokens the chat-formatted prompt is cut to."
    )
