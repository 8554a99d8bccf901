"""Request extras of the Stable Audio pipeline: diffusers' own names for the clip's window
(``audio_start_in_s``, ``audio_end_in_s``), for callers of the Python API and ``--extra``; the
shared ``audio_start_s`` / ``duration_s`` say the same (give one spelling, not both)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class StableAudioExtras(BaseModel):
    """Stable Audio's own request options (text to audio)."""

    model_config = ConfigDict(extra="forbid")

    audio_start_in_s: float | None = Field(
        None, ge=0.0, le=3600.0, description="diffusers' start of the clip, in seconds."
    )
    audio_end_in_s: float | None = Field(
        None, gt=0.0, le=3600.0, description="diffusers' end of the clip, in seconds."
    )
