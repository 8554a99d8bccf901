"""What a Stable Audio checkpoint is, read from its configs, and the request checks that follow.

Nothing here loads weights, so ``precheck`` validates a request before a long load; a loaded
pipeline's ``validate`` runs the same :func:`check_request` once per request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from omni_core import GenerationRequest, InvalidRequestError, ModelNotFoundError
from omni_stable_audio.extras import StableAudioExtras

#: diffusers' StableAudioPipeline defaults (its model card runs 200 steps; 100 is the call's).
DEFAULT_STEPS = 100
DEFAULT_GUIDANCE = 7.0


@dataclass(frozen=True)
class StableAudioLayout:
    """What the configs of a Stable Audio checkpoint say, enough to validate a request."""

    path: Path
    sample_rate: int
    hop_length: int  # waveform samples per latent frame (the Oobleck VAE's downsampling)
    latent_frames: int  # the DiT's sample_size: every clip is denoised at this length
    latent_channels: int
    seconds_min: float  # the seconds conditioner's range (projection_model min/max_value)
    seconds_max: float

    @property
    def max_seconds(self) -> float:
        """The longest clip: every latent frame decoded (47.55 s for stable-audio-open-1.0)."""
        return self.latent_frames * self.hop_length / self.sample_rate

    @classmethod
    def read(cls, path: Path) -> StableAudioLayout:
        try:
            index = json.loads((path / "model_index.json").read_text())
            vae = json.loads((path / "vae" / "config.json").read_text())
            dit = json.loads((path / "transformer" / "config.json").read_text())
            projection = json.loads((path / "projection_model" / "config.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelNotFoundError(f"{path}: not a Stable Audio checkpoint ({exc})") from exc
        if index.get("_class_name") != "StableAudioPipeline":
            raise ModelNotFoundError(
                f"{path}: model_index.json names {index.get('_class_name')!r}, not "
                "StableAudioPipeline"
            )
        hop = 1
        for ratio in vae.get("downsampling_ratios", [2, 4, 4, 8, 8]):
            hop *= int(ratio)
        return cls(
            path=path,
            sample_rate=int(vae.get("sampling_rate", 44100)),
            hop_length=hop,
            latent_frames=int(dit.get("sample_size", 1024)),
            latent_channels=int(dit.get("in_channels", 64)),
            seconds_min=float(projection.get("min_value", 0)),
            seconds_max=float(projection.get("max_value", 512)),
        )


def _window(layout: StableAudioLayout, request: GenerationRequest, extras: StableAudioExtras):
    """(start, duration) in seconds from the shared fields or diffusers' names (not both)."""
    start, duration = request.audio_start_s, request.duration_s
    if extras.audio_start_in_s is not None:
        if start is not None:
            raise InvalidRequestError(
                "extras.audio_start_in_s: give audio_start_s or audio_start_in_s, not both",
                param="audio_start_in_s",
            )
        start = extras.audio_start_in_s
    start = 0.0 if start is None else float(start)
    if extras.audio_end_in_s is not None:
        if duration is not None:
            raise InvalidRequestError(
                "extras.audio_end_in_s: give duration_s or audio_end_in_s, not both",
                param="audio_end_in_s",
            )
        if extras.audio_end_in_s <= start:
            raise InvalidRequestError(
                f"audio_end_in_s={extras.audio_end_in_s:g} must be after the start ({start:g} s)",
                param="audio_end_in_s",
            )
        duration = extras.audio_end_in_s - start
    if start < layout.seconds_min or start > layout.seconds_max:
        raise InvalidRequestError(
            f"audio_start_s={start:g}: the model's seconds conditioning covers "
            f"{layout.seconds_min:g}-{layout.seconds_max:g} s",
            param="audio_start_s",
        )
    longest = layout.max_seconds - start
    if longest * layout.sample_rate < 1:
        raise InvalidRequestError(
            f"audio_start_s={start:g}: this model's clips end at {layout.max_seconds:g} s",
            param="audio_start_s",
        )
    duration = longest if duration is None else float(duration)
    if duration > longest + 1e-9:
        raise InvalidRequestError(
            f"duration_s={duration:g}: this model makes at most {layout.max_seconds:g} s of audio"
            + (f" ({longest:g} s from a start at {start:g} s)" if start else ""),
            param="duration_s",
        )
    if int((start + duration) * layout.sample_rate) - int(start * layout.sample_rate) < 1:
        raise InvalidRequestError(
            f"duration_s={duration:g}: shorter than one sample at {layout.sample_rate} Hz",
            param="duration_s",
        )
    return start, duration


def check_request(layout: StableAudioLayout, request: GenerationRequest) -> GenerationRequest:
    """``request`` with its defaults completed, or an InvalidRequestError (before any compute)."""
    try:
        extras = StableAudioExtras.model_validate(request.extras)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "extras"
        raise InvalidRequestError(f"extras.{where}: {first['msg']}", param=where) from None
    for name, given in (
        ("images", request.images),
        ("num_frames", request.num_frames),
        ("width", request.width),
        ("height", request.height),
        ("voice", request.voice),
        ("reference", request.reference),
    ):
        if given:
            raise InvalidRequestError(
                f"stable-audio makes audio from text alone; {name} is not taken", param=name
            )
    if request.num_outputs != 1:
        raise InvalidRequestError(
            f"stable-audio makes one clip per request, not {request.num_outputs} (send several "
            "requests: they share every denoising step)",
            param="num_outputs",
        )
    if request.sample_rate not in (None, layout.sample_rate):
        raise InvalidRequestError(
            f"sample_rate={request.sample_rate}: this model makes {layout.sample_rate} Hz audio "
            "and does not resample",
            param="sample_rate",
        )
    if request.speed != 1.0:
        raise InvalidRequestError("speed: generated audio is not sped up", param="speed")
    start, duration = _window(layout, request, extras)
    guidance = DEFAULT_GUIDANCE if request.guidance_scale is None else request.guidance_scale
    return request.model_copy(
        update={
            "audio_start_s": start,
            "duration_s": duration,
            "guidance_scale": guidance,
            "num_inference_steps": request.num_inference_steps or DEFAULT_STEPS,
            "sample_rate": layout.sample_rate,
            "extras": {"audio_start_in_s": None, "audio_end_in_s": None},
        }
    )


def is_checked(request: GenerationRequest) -> bool:
    """Whether ``request`` is what :func:`check_request` returns (cheap)."""
    return (
        None not in (request.audio_start_s, request.duration_s, request.num_inference_steps)
        and request.guidance_scale is not None
        and request.sample_rate is not None
        and request.extras == {"audio_start_in_s": None, "audio_end_in_s": None}
    )
