"""What a Qwen-Image checkpoint is, read from its configs, and the request checks that follow.

Nothing here loads weights, so ``precheck`` validates a request before a long load; a loaded
pipeline's ``validate`` runs the same :func:`check_request` once per request (completing the
defaults and decoding the input images, which ``prepare`` then trusts).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from omni_core import GenerationRequest, InvalidRequestError, ModelNotFoundError
from omni_core.diffusion import request_image
from omni_qwen.extras import QwenImageExtras

#: Output area edits default to (and Edit-2509's VAE input area).
EDIT_AREA = 1024 * 1024
#: The side of the default text-to-image size, in pixels: diffusers' default for Qwen-Image
#: (128 latents x the real VAE's factor 8), whatever VAE factor a checkpoint has (a tiny one's
#: 16 must not make the default 2048x2048, the largest size the model knows).
DEFAULT_SIDE = 1024
#: Qwen-Image's native sizes (its model card), on the published checkpoints' 16-pixel grid and
#: for the image sequences their scheduler is configured for (:data:`PUBLISHED_IMAGE_TOKENS`);
#: a size error lists them as the checkpoint at hand makes them (:func:`native_sizes`).
NATIVE_SIZES = (
    (1328, 1328),
    (1664, 928),
    (928, 1664),
    (1472, 1140),
    (1140, 1472),
    (1584, 1056),
    (1056, 1584),
)
#: The published checkpoints' pixels per image token (VAE 8x times the 2x2 patch) and the
#: longest image sequence their scheduler's resolution shift is configured for.
PUBLISHED_GRID = 16
PUBLISHED_IMAGE_TOKENS = 8192
DEFAULT_STEPS = 50
DEFAULT_CFG = 4.0


@dataclass(frozen=True)
class QwenLayout:
    """What the configs of a Qwen-Image checkpoint say, enough to validate a request."""

    path: Path
    class_name: str
    vae_scale_factor: int
    latent_channels: int
    #: 2 when the scheduler stretches sigmas to a terminal value (one step divides by zero).
    min_steps: int = 1
    guidance_embeds: bool = False
    #: The longest image sequence (tokens) the scheduler's resolution shift is configured for
    #: (``max_image_seq_len``; diffusers' default where the config has none).
    max_image_tokens: int = 4096

    @property
    def multiple(self) -> int:
        """Pixel sizes must be multiples of this: the VAE factor times the 2x2 patch."""
        return self.vae_scale_factor * 2

    @classmethod
    def read(cls, path: Path) -> QwenLayout:
        try:
            index = json.loads((path / "model_index.json").read_text())
            vae = json.loads((path / "vae" / "config.json").read_text())
            transformer = json.loads((path / "transformer" / "config.json").read_text())
            scheduler = json.loads((path / "scheduler" / "scheduler_config.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelNotFoundError(f"{path}: not a Qwen-Image checkpoint ({exc})") from exc
        return cls(
            path=path,
            class_name=str(index.get("_class_name", "")),
            vae_scale_factor=2 ** len(vae.get("temperal_downsample", [False, True, True])),
            latent_channels=int(transformer.get("in_channels", 64)) // 4,
            min_steps=2 if scheduler.get("shift_terminal") else 1,
            guidance_embeds=bool(transformer.get("guidance_embeds", False)),
            max_image_tokens=int(scheduler.get("max_image_seq_len") or 4096),
        )


def calculate_dimensions(area: int, ratio: float) -> tuple[int, int]:
    """(width, height) of ``area`` pixels at ``ratio``, rounded to multiples of 32 (Qwen's rule)."""
    width = math.sqrt(area * ratio)
    height = width / ratio
    return round(width / 32) * 32, round(height / 32) * 32


def check_request(
    layout: QwenLayout,
    request: GenerationRequest,
    *,
    family: str,
    image_range: tuple[int, int],
) -> GenerationRequest:
    """Complete the defaults of ``request`` and reject what ``family`` cannot do, before any
    compute. ``image_range`` is how many input images it takes: (min, max)."""
    try:
        extras = QwenImageExtras.model_validate(request.extras)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "extras"
        raise InvalidRequestError(f"extras.{where}: {first['msg']}", param=where) from None
    if request.num_frames not in (None, 1):
        raise InvalidRequestError(
            f"{family} makes images; num_frames must be 1, not {request.num_frames}",
            param="num_frames",
        )
    low, high = image_range
    count = len(request.images)
    if high == 0 and count:
        raise InvalidRequestError(
            f"{family} is text-to-image and takes no input image (got {count}); use a "
            "Qwen-Image-Edit model to edit images",
            param="images",
        )
    if count < low:
        raise InvalidRequestError(
            f"{family} edits an image: give one with images=[...] (CLI: --image PATH)",
            param="images",
        )
    if count > high:
        raise InvalidRequestError(
            f"{family} takes at most {high} input image{'s' if high > 1 else ''}, got {count}",
            param="images",
        )
    images = [request_image(image, i) for i, image in enumerate(request.images)]
    height, width = request.height, request.width
    if images:
        reference = images[-1] if image_range[1] > 1 else images[0]
        calc_w, calc_h = calculate_dimensions(EDIT_AREA, reference.width / reference.height)
        width = width or calc_w // layout.multiple * layout.multiple
        height = height or calc_h // layout.multiple * layout.multiple
    else:
        default = max(layout.multiple, DEFAULT_SIDE // layout.multiple * layout.multiple)
        height, width = height or default, width or default
    for name, value in (("height", height), ("width", width)):
        if value % layout.multiple or value < layout.multiple:
            raise InvalidRequestError(size_error(name, value, layout), param="size")
    steps = request.num_inference_steps or DEFAULT_STEPS
    if steps < layout.min_steps:
        raise InvalidRequestError(
            f"num_inference_steps={steps}: this checkpoint's scheduler (shift_terminal) needs "
            f"at least {layout.min_steps} steps",
            param="num_inference_steps",
        )
    scale = request.guidance_scale
    if extras.true_cfg_scale is not None:
        if scale is not None and scale != extras.true_cfg_scale:
            raise InvalidRequestError(
                f"guidance_scale={scale} and true_cfg_scale={extras.true_cfg_scale} disagree; "
                "they are the same setting for Qwen-Image, give one",
                param="guidance_scale",
            )
        scale = extras.true_cfg_scale
    return request.model_copy(
        update={
            "images": images,
            "height": height,
            "width": width,
            "num_frames": None,
            "guidance_scale": DEFAULT_CFG if scale is None else scale,
            "num_inference_steps": steps,
            "extras": {**extras.model_dump(), "true_cfg_scale": None},
        }
    )


def size_error(name: str, value: int, layout: QwenLayout) -> str:
    """Why ``value`` cannot be a side: the multiple, the two nearest sides that work, and this
    checkpoint's native sizes (:func:`native_sizes`)."""
    multiple = layout.multiple
    low = value // multiple * multiple
    near = str(multiple) if value < multiple else f"{low} or {low + multiple}"
    native = ", ".join(f"{w}x{h}" for w, h in native_sizes(layout))
    return (
        f"{name}={value}: this checkpoint makes sides in multiples of {multiple} pixels "
        f"(its VAE's factor {layout.vae_scale_factor} times the 2x2 patch); the nearest are "
        f"{near}; its native sizes: {native}"
    )


def native_sizes(layout: QwenLayout) -> list[tuple[int, int]]:
    """Qwen-Image's native sizes as this checkpoint makes them: the model card's image-token
    grids (sides / 16), scaled by the image sequences this checkpoint's scheduler is configured
    for against the published ones, on this checkpoint's pixel multiple. The published
    checkpoints get the model card's sizes (4:3's 1140, off the 16-pixel grid, as 1136); a
    small test checkpoint gets the small sizes it was configured for."""
    scale = math.sqrt(layout.max_image_tokens / PUBLISHED_IMAGE_TOKENS)
    sizes: list[tuple[int, int]] = []
    for width, height in NATIVE_SIZES:
        w, h = (
            max(1, round(side / PUBLISHED_GRID * scale)) * layout.multiple
            for side in (width, height)
        )
        if (w, h) not in sizes:
            sizes.append((w, h))
    return sizes


def is_checked(request: GenerationRequest) -> bool:
    """Whether ``request`` is what :func:`check_request` returns: size, steps and guidance filled
    in, every extra present and ``true_cfg_scale`` folded into ``guidance_scale``. Cheap; lets
    ``prepare`` trust the request the core validated and still validate a raw one."""
    extras = request.extras
    return (
        None not in (request.height, request.width, request.num_inference_steps)
        and request.guidance_scale is not None
        and extras.keys() == QwenImageExtras.model_fields.keys()
        and extras["true_cfg_scale"] is None
    )
