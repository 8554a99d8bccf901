"""What an LTX-2 checkpoint is, read from its configs, and the request checks that follow.

Nothing here loads weights, so ``precheck`` validates a request before a long load; a loaded
pipeline's ``validate`` runs the same :func:`check_request` once per request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from omni_core import GenerationRequest, InvalidRequestError, ModelNotFoundError
from omni_ltx.extras import LTXExtras

#: diffusers' LTX2Pipeline defaults: 512x768, 121 frames (5 s at 24 fps), 30 steps, CFG 3.
DEFAULT_HEIGHT, DEFAULT_WIDTH = 512, 768
DEFAULT_FRAMES = 121
DEFAULT_STEPS = 30
DEFAULT_GUIDANCE = 3.0
#: diffusers refuses sides that are not multiples of 32 (the real VAE's spatial factor).
SIDE_MULTIPLE = 32
#: The two pipelines of the family, as model_index.json names them.
ARCHITECTURES = ("LTX2Pipeline", "LTX2ImageToVideoPipeline")


@dataclass(frozen=True)
class LTXLayout:
    """What the configs of an LTX-2 checkpoint say, enough to validate a request."""

    path: Path
    spatial: int  # the VAE's spatial factor (32)
    temporal: int  # the VAE's temporal factor (8)
    image_to_video: bool = False  # LTX2ImageToVideoPipeline: one input image
    #: The scheduler's ``shift_terminal`` stretch divides by zero on a 1-step schedule.
    min_steps: int = 1

    @classmethod
    def read(cls, path: Path) -> LTXLayout:
        try:
            index = json.loads((path / "model_index.json").read_text())
            vae = json.loads((path / "vae" / "config.json").read_text())
            scheduler = json.loads((path / "scheduler" / "scheduler_config.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelNotFoundError(f"{path}: not an LTX-2 checkpoint ({exc})") from exc
        if index.get("_class_name") not in ARCHITECTURES:
            raise ModelNotFoundError(
                f"{path}: model_index.json names {index.get('_class_name')!r}, not "
                f"{' or '.join(ARCHITECTURES)}"
            )
        scaling = sum(bool(s) for s in vae.get("spatio_temporal_scaling", (True,) * 4))
        spatial = vae.get("spatial_compression_ratio") or int(vae.get("patch_size", 4)) * 2**scaling
        temporal = vae.get("temporal_compression_ratio") or int(vae.get("patch_size_t", 1)) * (
            2**scaling
        )
        return cls(
            path=path,
            spatial=int(spatial),
            temporal=int(temporal),
            image_to_video=index["_class_name"] == ARCHITECTURES[1],
            min_steps=2 if scheduler.get("shift_terminal") else 1,
        )


def parse_extras(extras: dict[str, Any]) -> LTXExtras:
    """The extras model, or an InvalidRequestError naming the bad field."""
    try:
        return LTXExtras.model_validate(extras)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "extras"
        raise InvalidRequestError(f"extras.{where}: {first['msg']}", param=where) from None


def check_request(layout: LTXLayout, request: GenerationRequest) -> GenerationRequest:
    """``request`` with its defaults completed, or an InvalidRequestError (before any compute)."""
    extras = parse_extras(request.extras)
    name = "ltx-2-i2v" if layout.image_to_video else "ltx-2-t2v"
    if request.num_outputs != 1:
        raise InvalidRequestError(
            f"LTX-2 makes one video per request, not {request.num_outputs}", param="n"
        )
    if layout.image_to_video and len(request.images) != 1:
        raise InvalidRequestError(
            f"{name} animates exactly one input image (got {len(request.images)})",
            param="images",
        )
    if not layout.image_to_video and request.images:
        raise InvalidRequestError(
            f"{name} is text-to-video and takes no input image (got {len(request.images)})",
            param="images",
        )
    frames = request.num_frames or DEFAULT_FRAMES
    if (frames - 1) % layout.temporal:
        k = max(0, round((frames - 1) / layout.temporal))
        raise InvalidRequestError(
            f"num_frames {frames} must be {layout.temporal}k+1 (its VAE's temporal factor); the "
            f"nearest is {layout.temporal * k + 1}",
            param="num_frames",
        )
    if (request.height is None) != (request.width is None):
        raise InvalidRequestError("give both height and width, or neither", param="size")
    height = request.height or DEFAULT_HEIGHT
    width = request.width or DEFAULT_WIDTH
    multiple = max(SIDE_MULTIPLE, layout.spatial)
    for side, value in (("height", height), ("width", width)):
        if value % multiple:
            low = value // multiple * multiple
            near = str(multiple) if low == 0 else f"{low} or {low + multiple}"
            raise InvalidRequestError(
                f"{side}={value}: LTX-2 makes sides in multiples of {multiple} pixels; the "
                f"nearest are {near}",
                param="size",
            )
    steps = request.num_inference_steps or DEFAULT_STEPS
    if steps < layout.min_steps:
        raise InvalidRequestError(
            f"num_inference_steps={steps}: this LTX-2 scheduler (its shift_terminal) needs at "
            f"least {layout.min_steps} steps",
            param="num_inference_steps",
        )
    guidance = DEFAULT_GUIDANCE if request.guidance_scale is None else request.guidance_scale
    return request.model_copy(
        update={
            "height": height,
            "width": width,
            "num_frames": frames,
            "guidance_scale": float(guidance),
            "num_inference_steps": steps,
            "extras": extras.model_dump(),
        }
    )


def is_checked(request: GenerationRequest) -> bool:
    """Whether ``request`` is what :func:`check_request` returns (cheap)."""
    return (
        None not in (request.height, request.width, request.num_frames)
        and request.num_inference_steps is not None
        and request.guidance_scale is not None
        and request.extras.keys() == LTXExtras.model_fields.keys()
    )
