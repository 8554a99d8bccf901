"""What a HunyuanVideo-1.5 checkpoint is, read from its configs, and the request checks that
follow.

Nothing here loads weights, so ``precheck`` validates a request before a long load; a loaded
pipeline's ``validate`` runs the same :func:`check_request` once per request.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from omni_core import GenerationRequest, InvalidRequestError, ModelNotFoundError
from omni_hunyuan_video.extras import HunyuanVideoExtras

#: diffusers' HunyuanVideo15Pipeline defaults: 121 frames (5 s at 24 fps), 50 steps.
DEFAULT_FRAMES = 121
DEFAULT_STEPS = 50
DEFAULT_FPS = 24
#: diffusers' default aspect ratio (height, width ratio terms) when a request names no size.
DEFAULT_ASPECT = (9, 16)
#: The two pipelines of the family, as model_index.json names them.
ARCHITECTURES = ("HunyuanVideo15Pipeline", "HunyuanVideo15ImageToVideoPipeline")


@dataclass(frozen=True)
class HunyuanVideoLayout:
    """What the configs of a HunyuanVideo-1.5 checkpoint say, enough to validate a request."""

    path: Path
    spatial: int  # the VAE's spatial factor (16)
    temporal: int  # the VAE's temporal factor (4)
    latent_channels: int
    target_size: int  # the transformer's pixel bucket size (480p: 640)
    image_embed_dim: int
    guider: dict[str, Any]  # guider/guider_config.json (ClassifierFreeGuidance)
    image_to_video: bool = False  # HunyuanVideo15ImageToVideoPipeline: one input image

    @classmethod
    def read(cls, path: Path) -> HunyuanVideoLayout:
        try:
            index = json.loads((path / "model_index.json").read_text())
            vae = json.loads((path / "vae" / "config.json").read_text())
            transformer = json.loads((path / "transformer" / "config.json").read_text())
            guider_file = path / "guider" / "guider_config.json"
            guider = json.loads(guider_file.read_text()) if guider_file.exists() else {}
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelNotFoundError(f"{path}: not a HunyuanVideo-1.5 checkpoint ({exc})") from exc
        if index.get("_class_name") not in ARCHITECTURES:
            raise ModelNotFoundError(
                f"{path}: model_index.json names {index.get('_class_name')!r}, not "
                f"{' or '.join(ARCHITECTURES)}"
            )
        return cls(
            path=path,
            spatial=int(vae.get("spatial_compression_ratio", 16)),
            temporal=int(vae.get("temporal_compression_ratio", 4)),
            latent_channels=int(vae.get("latent_channels", 32)),
            target_size=int(transformer.get("target_size", 640)),
            image_embed_dim=int(transformer.get("image_embed_dim", 1152)),
            guider=guider,
            image_to_video=index["_class_name"] == ARCHITECTURES[1],
        )

    @property
    def default_guidance(self) -> float:
        """The checkpoint guider's scale, or 1 (no CFG) where the guider is switched off."""
        if not self.guider.get("enabled", True):
            return 1.0
        return float(self.guider.get("guidance_scale", 7.5))

    def default_size(
        self, height: int = DEFAULT_ASPECT[0], width: int = DEFAULT_ASPECT[1]
    ) -> tuple[int, int]:
        """(height, width): diffusers' bucket of the transformer's target size closest to this
        aspect ratio (16:9 for text to video, the image's for image to video)."""
        from diffusers.pipelines.hunyuan_video1_5.image_processor import (
            HunyuanVideo15ImageProcessor,
        )

        processor = HunyuanVideo15ImageProcessor(vae_scale_factor=self.spatial)
        h, w = processor.calculate_default_height_width(height, width, self.target_size)
        return int(h), int(w)

    def cfg_enabled(self, scale: float) -> bool:
        """Whether CFG runs at all (diffusers' guider: off at scale 1, or 0 in the original
        formulation)."""
        if not self.guider.get("enabled", True):
            return False
        neutral = 0.0 if self.guider.get("use_original_formulation", False) else 1.0
        return not math.isclose(scale, neutral)


def parse_extras(extras: dict[str, Any]) -> HunyuanVideoExtras:
    """The extras model, or an InvalidRequestError naming the bad field."""
    try:
        return HunyuanVideoExtras.model_validate(extras)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "extras"
        raise InvalidRequestError(f"extras.{where}: {first['msg']}", param=where) from None


def check_request(layout: HunyuanVideoLayout, request: GenerationRequest) -> GenerationRequest:
    """``request`` with its defaults completed, or an InvalidRequestError (before any compute)."""
    extras = parse_extras(request.extras)
    if request.num_outputs != 1:
        raise InvalidRequestError(
            f"HunyuanVideo-1.5 makes one video per request, not {request.num_outputs}",
            param="n",
        )
    bucket = None
    if layout.image_to_video:
        size = getattr(request.images[0], "size", None) if len(request.images) == 1 else None
        if size is None:
            raise InvalidRequestError(
                "hunyuan-video-1.5-i2v animates exactly one input image "
                f"(got {len(request.images)})",
                param="images",
            )
        bucket = layout.default_size(height=size[1], width=size[0])
    elif request.images:
        raise InvalidRequestError(
            "hunyuan-video-1.5-t2v is text-to-video and takes no input image "
            f"(got {len(request.images)})",
            param="images",
        )
    frames = request.num_frames or DEFAULT_FRAMES
    if (frames - 1) % layout.temporal:
        k = max(0, round((frames - 1) / layout.temporal))
        raise InvalidRequestError(
            f"num_frames {frames} must be {layout.temporal}k+1 (e.g. 33, 61, 121); the nearest "
            f"is {layout.temporal * k + 1}",
            param="num_frames",
        )
    if bucket is not None:  # diffusers crops the image to its bucket: the video's size
        height, width = bucket
        if (request.height, request.width) not in ((None, None), bucket):
            raise InvalidRequestError(
                f"size {request.width}x{request.height}: HunyuanVideo-1.5 image-to-video makes "
                f"the image's size bucket, {width}x{height}; send that size or none",
                param="size",
            )
    elif request.height is None and request.width is None:
        height, width = layout.default_size()
    elif request.height is None or request.width is None:
        raise InvalidRequestError("give both height and width, or neither", param="size")
    else:
        height, width = request.height, request.width
    multiple = layout.spatial
    for name, value in (("height", height), ("width", width)):
        if value % multiple or value < multiple:
            low = value // multiple * multiple
            near = str(multiple) if value < multiple else f"{low} or {low + multiple}"
            raise InvalidRequestError(
                f"{name}={value}: HunyuanVideo-1.5 makes sides in multiples of {multiple} pixels "
                f"(its VAE's spatial factor); the nearest are {near}",
                param="size",
            )
    guidance = layout.default_guidance if request.guidance_scale is None else request.guidance_scale
    return request.model_copy(
        update={
            "height": height,
            "width": width,
            "num_frames": frames,
            "guidance_scale": float(guidance),
            "num_inference_steps": request.num_inference_steps or DEFAULT_STEPS,
            "extras": extras.model_dump(),
        }
    )


def is_checked(request: GenerationRequest) -> bool:
    """Whether ``request`` is what :func:`check_request` returns (cheap)."""
    return (
        None not in (request.height, request.width, request.num_frames)
        and request.num_inference_steps is not None
        and request.guidance_scale is not None
        and request.extras.keys() == HunyuanVideoExtras.model_fields.keys()
    )
