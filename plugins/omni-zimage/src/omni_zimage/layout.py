"""What a Z-Image checkpoint is, read from its configs, and the request checks that follow.

Nothing here loads weights, so ``precheck`` validates a request before a long load; a loaded
pipeline's ``validate`` runs the same :func:`check_request` once per request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from omni_core import GenerationRequest, InvalidRequestError, ModelNotFoundError
from omni_zimage.extras import ZImageExtras

#: diffusers' default side (1024 px).
DEFAULT_SIDE = 1024
#: Z-Image-Turbo's recommended 9 steps (8 transformer forwards that matter) without CFG: what
#: the Turbo model card and vLLM-Omni's playground run. Base Z-Image wants ~28-50 steps and a
#: guidance_scale of 3-5; a request says so.
DEFAULT_STEPS = 9
DEFAULT_GUIDANCE = 0.0


@dataclass(frozen=True)
class ZImageLayout:
    """What the configs of a Z-Image checkpoint say, enough to validate a request."""

    path: Path
    vae_scale_factor: int
    latent_channels: int
    patch_size: int

    @property
    def multiple(self) -> int:
        """Pixel sides must be multiples of this: the VAE factor times the 2x2 patches."""
        return self.vae_scale_factor * 2

    @classmethod
    def read(cls, path: Path) -> ZImageLayout:
        try:
            index = json.loads((path / "model_index.json").read_text())
            vae = json.loads((path / "vae" / "config.json").read_text())
            transformer = json.loads((path / "transformer" / "config.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelNotFoundError(f"{path}: not a Z-Image checkpoint ({exc})") from exc
        if index.get("_class_name") != "ZImagePipeline":
            raise ModelNotFoundError(
                f"{path}: model_index.json names {index.get('_class_name')!r}, not ZImagePipeline"
            )
        return cls(
            path=path,
            vae_scale_factor=2 ** (len(vae.get("block_out_channels", [0] * 4)) - 1),
            latent_channels=int(transformer.get("in_channels", 16)),
            patch_size=int(transformer.get("all_patch_size", [2])[0]),
        )


def check_request(layout: ZImageLayout, request: GenerationRequest) -> GenerationRequest:
    """``request`` with its defaults completed, or an InvalidRequestError (before any compute)."""
    try:
        extras = ZImageExtras.model_validate(request.extras)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "extras"
        raise InvalidRequestError(f"extras.{where}: {first['msg']}", param=where) from None
    if request.num_frames not in (None, 1):
        raise InvalidRequestError(
            f"z-image makes images; num_frames must be 1, not {request.num_frames}",
            param="num_frames",
        )
    if request.images:
        raise InvalidRequestError(
            f"z-image is text-to-image and takes no input image (got {len(request.images)})",
            param="images",
        )
    multiple = layout.multiple
    default = DEFAULT_SIDE // multiple * multiple
    height, width = request.height or default, request.width or default
    for name, value in (("height", height), ("width", width)):
        if value % multiple or value < multiple:
            low = value // multiple * multiple
            near = str(multiple) if value < multiple else f"{low} or {low + multiple}"
            raise InvalidRequestError(
                f"{name}={value}: Z-Image makes sides in multiples of {multiple} pixels (its "
                f"VAE's factor {layout.vae_scale_factor} times the 2x2 patches); the nearest "
                f"are {near}",
                param="size",
            )
    # GenerationRequest itself refuses a negative scale; 0 is Z-Image-Turbo's "no CFG".
    guidance = DEFAULT_GUIDANCE if request.guidance_scale is None else request.guidance_scale
    return request.model_copy(
        update={
            "height": height,
            "width": width,
            "num_frames": None,
            "guidance_scale": guidance,
            "num_inference_steps": request.num_inference_steps or DEFAULT_STEPS,
            "extras": extras.model_dump(),
        }
    )


def is_checked(request: GenerationRequest) -> bool:
    """Whether ``request`` is what :func:`check_request` returns (cheap)."""
    return (
        None not in (request.height, request.width, request.num_inference_steps)
        and request.guidance_scale is not None
        and request.extras.keys() == ZImageExtras.model_fields.keys()
    )
