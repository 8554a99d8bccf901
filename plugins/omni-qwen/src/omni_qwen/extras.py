"""Request extras of the Qwen-Image pipelines (the knobs the shared request does not have)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class QwenImageExtras(BaseModel):
    """Qwen-Image's own request options.

    ``true_cfg_scale`` is diffusers' name for the classifier-free guidance scale; omni's shared
    ``guidance_scale`` means the same thing, and this alias is accepted so diffusers-style
    requests work unchanged (giving both with different values is an error).
    """

    model_config = ConfigDict(extra="forbid")

    true_cfg_scale: float | None = Field(
        None, ge=0.0, le=100.0, description="Alias of guidance_scale (diffusers' name)."
    )
    max_sequence_length: int = Field(
        512, ge=1, le=1024, description="Most prompt tokens kept (text-to-image only)."
    )
