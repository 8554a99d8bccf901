"""Request extras of the HunyuanVideo-1.5 pipeline: what the MP4 plays at (the frame count is
the shared request's ``num_frames``; ``guidance_scale`` overrides the checkpoint guider's)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class HunyuanVideoExtras(BaseModel):
    """HunyuanVideo-1.5's own request options (text to video)."""

    model_config = ConfigDict(extra="forbid")

    fps: int | None = Field(
        None,
        ge=1,
        le=120,
        description="Frame rate of the MP4 (default 24, what HunyuanVideo-1.5 is trained at); "
        "with OpenAI's seconds it also sets the frame count.",
    )
