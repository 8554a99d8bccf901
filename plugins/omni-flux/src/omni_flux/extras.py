"""Request extras of the FLUX pipelines: the family's own knobs, beside the shared request.

The shared ``guidance_scale`` is FLUX.1-dev's *embedded* guidance (the distilled scale the
transformer takes as an input, diffusers' ``guidance_scale``); classifier-free guidance with a
negative prompt is the separate ``true_cfg_scale``, as in diffusers' ``FluxPipeline``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class FluxExtras(BaseModel):
    """FLUX.1's own request options (text to image)."""

    model_config = ConfigDict(extra="forbid")

    true_cfg_scale: float = Field(
        1.0,
        ge=0.0,
        le=100.0,
        description="True classifier-free guidance: runs (one more forward per step) when it is "
        "above 1 and a negative_prompt is given; the embedded guidance is guidance_scale.",
    )
    max_sequence_length: int = Field(
        512, ge=1, le=512, description="T5 tokens the prompt is padded / cut to (512 at most)."
    )
    prompt_2: str | None = Field(
        None, description="The T5 prompt, when it should differ from the CLIP one (prompt)."
    )
    negative_prompt_2: str | None = Field(
        None, description="The T5 negative prompt (default: negative_prompt)."
    )


class KontextExtras(FluxExtras):
    """FLUX.1-Kontext's options: FLUX.1's plus how the input image is prepared."""

    auto_resize: bool = Field(
        True,
        description="Resize the input image to the Kontext training resolution nearest its "
        "aspect ratio (diffusers' _auto_resize); false keeps its size (cut to multiples of 16).",
    )


class Flux2Extras(BaseModel):
    """FLUX.2's own request options (text to image)."""

    model_config = ConfigDict(extra="forbid")

    max_sequence_length: int = Field(
        512, ge=1, le=1024, description="Text tokens the prompt is padded / cut to."
    )
