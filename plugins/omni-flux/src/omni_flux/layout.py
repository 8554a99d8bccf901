"""What a FLUX.1 checkpoint is, read from its configs, and the request checks that follow.

Nothing here loads weights, so ``precheck`` validates a request before a long load; a loaded
pipeline's ``validate`` runs the same :func:`check_request` once per request (completing the
defaults and decoding the input image, which ``prepare`` then trusts).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from omni_core import GenerationRequest, InvalidRequestError, ModelNotFoundError
from omni_core.diffusion import request_image
from omni_flux.extras import FluxExtras, KontextExtras

#: The side of the default size: diffusers' default (128 latents x the VAE's factor 8).
DEFAULT_SIDE = 1024
#: diffusers' FluxPipeline default steps, and FLUX.1-schnell's recommended 4 (timestep-distilled).
DEFAULT_STEPS = 28
SCHNELL_STEPS = 4
#: diffusers' default embedded guidance of FLUX.1-dev and Kontext.
DEFAULT_GUIDANCE = 3.5
#: FLUX.1-Kontext's training resolutions (width, height); diffusers' PREFERRED_KONTEXT_RESOLUTIONS.
KONTEXT_RESOLUTIONS = (
    (672, 1568),
    (688, 1504),
    (720, 1456),
    (752, 1392),
    (800, 1328),
    (832, 1248),
    (880, 1184),
    (944, 1104),
    (1024, 1024),
    (1104, 944),
    (1184, 880),
    (1248, 832),
    (1328, 800),
    (1392, 752),
    (1456, 720),
    (1504, 688),
    (1568, 672),
)


@dataclass(frozen=True)
class FluxLayout:
    """What the configs of a FLUX.1 checkpoint say, enough to validate a request."""

    path: Path
    class_name: str
    vae_scale_factor: int
    latent_channels: int
    #: FLUX.1-dev and Kontext take the guidance scale as a transformer input; schnell does not.
    guidance_embeds: bool
    #: FLUX.2-klein's step-distilled checkpoints (``model_index.json``'s ``is_distilled``).
    distilled: bool = False

    @property
    def multiple(self) -> int:
        """Pixel sizes must be multiples of this: the VAE factor times the 2x2 latent packing."""
        return self.vae_scale_factor * 2

    @property
    def default_steps(self) -> int:
        return DEFAULT_STEPS if self.guidance_embeds else SCHNELL_STEPS

    @classmethod
    def read(cls, path: Path) -> FluxLayout:
        try:
            index = json.loads((path / "model_index.json").read_text())
            vae = json.loads((path / "vae" / "config.json").read_text())
            transformer = json.loads((path / "transformer" / "config.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelNotFoundError(f"{path}: not a FLUX checkpoint ({exc})") from exc
        return cls(
            path=path,
            class_name=str(index.get("_class_name", "")),
            vae_scale_factor=2 ** (len(vae.get("block_out_channels", [0] * 4)) - 1),
            latent_channels=int(transformer.get("in_channels", 64)) // 4,
            guidance_embeds=bool(transformer.get("guidance_embeds", False)),
            distilled=bool(index.get("is_distilled", False)),
        )


def parse_extras(model: type[FluxExtras], extras: dict[str, Any]) -> FluxExtras:
    """``extras`` validated by ``model``; the first problem as an InvalidRequestError."""
    try:
        return model.model_validate(extras)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "extras"
        raise InvalidRequestError(f"extras.{where}: {first['msg']}", param=where) from None


def kontext_size(image: Any, multiple: int, auto_resize: bool) -> tuple[int, int]:
    """(width, height) the input image is encoded at, as diffusers' Kontext pipeline picks it:
    its size cut to ``multiple``, then (``auto_resize``) the Kontext training resolution nearest
    that aspect ratio. (0, 0) for an image smaller than ``multiple`` on a side."""
    width, height = image.width // multiple * multiple, image.height // multiple * multiple
    if not width or not height:
        return 0, 0
    if auto_resize:
        ratio = width / height
        _, width, height = min((abs(ratio - w / h), w, h) for w, h in KONTEXT_RESOLUTIONS)
    return width // multiple * multiple, height // multiple * multiple


def check_request(
    layout: FluxLayout,
    request: GenerationRequest,
    *,
    family: str,
    extras_model: type[FluxExtras],
    edits: bool,
) -> GenerationRequest:
    """Complete the defaults of ``request`` and reject what ``family`` cannot do, before any
    compute. ``edits``: the pipeline takes exactly one input image (Kontext), else none."""
    extras = parse_extras(extras_model, request.extras)
    if request.num_frames not in (None, 1):
        raise InvalidRequestError(
            f"{family} makes images; num_frames must be 1, not {request.num_frames}",
            param="num_frames",
        )
    count = len(request.images)
    if not edits and count:
        raise InvalidRequestError(
            f"{family} is text-to-image and takes no input image (got {count}); use "
            "FLUX.1-Kontext to edit images",
            param="images",
        )
    if edits and count != 1:
        raise InvalidRequestError(
            f"{family} edits one image: give exactly one with images=[...] (CLI: --image PATH), "
            f"got {count}",
            param="images",
        )
    images = [request_image(image, i) for i, image in enumerate(request.images)]
    height, width = request.height, request.width
    if images:
        auto_resize = extras.auto_resize if isinstance(extras, KontextExtras) else True
        cond_w, cond_h = kontext_size(images[0], layout.multiple, auto_resize)
        if not cond_w:
            raise InvalidRequestError(
                f"images: the input image ({images[0].width}x{images[0].height}) is smaller than "
                f"{layout.multiple} px on a side",
                param="images",
            )
        width, height = width or cond_w, height or cond_h
    else:
        default = max(layout.multiple, DEFAULT_SIDE // layout.multiple * layout.multiple)
        height, width = height or default, width or default
    for name, value in (("height", height), ("width", width)):
        if value % layout.multiple or value < layout.multiple:
            raise InvalidRequestError(size_error(name, value, layout), param="size")
    guidance = request.guidance_scale
    if not layout.guidance_embeds and guidance not in (None, 0.0):
        raise InvalidRequestError(
            f"guidance_scale={guidance}: this checkpoint ({family}, FLUX.1-schnell layout) is not "
            "guidance-distilled and takes no guidance scale; true classifier-free guidance is "
            "extras.true_cfg_scale with a negative_prompt",
            param="guidance_scale",
        )
    if extras.true_cfg_scale > 1 and request.negative_prompt is None:
        raise InvalidRequestError(
            f"true_cfg_scale={extras.true_cfg_scale} needs a negative_prompt: true CFG runs the "
            "transformer on it too (without one, diffusers ignores the scale)",
            param="true_cfg_scale",
        )
    if layout.guidance_embeds and guidance is None:
        guidance = DEFAULT_GUIDANCE
    return request.model_copy(
        update={
            "images": images,
            "height": height,
            "width": width,
            "num_frames": None,
            "guidance_scale": guidance if layout.guidance_embeds else None,
            "num_inference_steps": request.num_inference_steps or layout.default_steps,
            "extras": extras.model_dump(),
        }
    )


def size_error(name: str, value: int, layout: FluxLayout) -> str:
    """Why ``value`` cannot be a side: the multiple and the two nearest sides that work."""
    multiple = layout.multiple
    low = value // multiple * multiple
    near = str(multiple) if value < multiple else f"{low} or {low + multiple}"
    return (
        f"{name}={value}: this checkpoint makes sides in multiples of {multiple} pixels "
        f"(its VAE's factor {layout.vae_scale_factor} times the 2x2 latent packing); the nearest "
        f"are {near}"
    )


def is_checked(request: GenerationRequest, extras_model: type[BaseModel]) -> bool:
    """Whether ``request`` is what :func:`check_request` returns (size and steps filled in,
    every extra present). Cheap; lets ``prepare`` trust the request the core validated and
    still validate a raw one."""
    return (
        None not in (request.height, request.width, request.num_inference_steps)
        and request.extras.keys() == extras_model.model_fields.keys()
    )
