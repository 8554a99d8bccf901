"""Request extras of the LTX-2 pipelines: the frame rate the video is made and played at, and
LTX-2's guidance terms (the shared request's ``guidance_scale`` is the video CFG scale).

Defaults are diffusers' ``LTX2Pipeline.__call__`` defaults, so a request that names none of
them renders what diffusers renders; an audio term left at 0 takes the video term's value, as
diffusers' ``audio_guidance_scale or guidance_scale`` does.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LTXExtras(BaseModel):
    """LTX-2's own request options (text or image to video, with sound)."""

    model_config = ConfigDict(extra="forbid")

    fps: int = Field(
        24,
        ge=1,
        le=120,
        description="Frame rate the video is made for (it conditions the positions and sets the "
        "sound's length) and the MP4 plays at; with OpenAI's seconds it also sets the frame "
        "count.",
    )
    motion_speed: float = Field(
        1.0,
        gt=0,
        le=10,
        description="Speed of the motion relative to real time (diffusers' motion_speed): the "
        "positions are conditioned on fps / motion_speed, so 0.2 is 5x slow motion; fps stays "
        "the playback rate and sets the sound's length.",
    )
    audio_guidance_scale: float = Field(
        7.0, ge=0, le=30, description="CFG scale of the audio track (0: the video's)."
    )
    guidance_rescale: float = Field(
        0.7,
        ge=0,
        le=1,
        description="Rescale of the guided video prediction toward the "
        "conditional one's spread (0: off).",
    )
    audio_guidance_rescale: float = Field(
        0.7, ge=0, le=1, description="The same for the audio track (0: the video's)."
    )
    stg_scale: float = Field(
        1.0,
        ge=0,
        le=30,
        description="Spatio-temporal guidance scale (0: off); only "
        "transformers with perturbable attention (LTX-2.3) are changed by it.",
    )
    audio_stg_scale: float = Field(
        1.0, ge=0, le=30, description="The same for audio (0: the video's)."
    )
    stg_blocks: list[int] = Field(
        default_factory=lambda: [28],
        max_length=64,
        description="Transformer blocks whose self-attention STG perturbs.",
    )
    modality_scale: float = Field(
        3.0,
        ge=0,
        le=30,
        description="Modality-isolation guidance scale (1 or less: off): "
        "a forward without the audio-video cross-attention steers away from it.",
    )
    audio_modality_scale: float = Field(
        3.0, ge=0, le=30, description="The same for audio (0: the video's)."
    )
    decode_timestep: float = Field(
        0.0, ge=0, le=1, description="The VAE's decode timestep (timestep-conditioned VAEs)."
    )
    decode_noise_scale: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Noise mixed into the latents before a timestep-"
        "conditioned decode (default: the decode timestep).",
    )
    image_crf: int | None = Field(
        None,
        ge=0,
        le=51,
        description="Image to video: the H.264 CRF the input image is recompressed at, as LTX-2 "
        "was trained (default: the checkpoint generation's, 33 for Gemma 3; 0: none).",
    )
