"""What a Wan checkpoint is, read from its JSON files, and the request checks that follow.

:class:`WanLayout` needs no weights, so :meth:`WanVideoPipeline.precheck` validates a request
before a long load, and the loaded pipeline's ``validate`` runs the same :meth:`WanLayout.check`
once per request (completing the defaults, which ``prepare`` then trusts).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni_core import GenerationRequest, InvalidRequestError, ModelNotFoundError
from omni_wan.extras import WanExtras

#: diffusers' defaults for Wan (WanPipeline.__call__).
DEFAULT_HEIGHT = 480
DEFAULT_WIDTH = 832
DEFAULT_FRAMES = 81
DEFAULT_STEPS = 50
DEFAULT_GUIDANCE = 5.0
#: Text tokens Wan's I2V cross-attention assumes (diffusers hard-codes it).
I2V_TEXT_TOKENS = 512


@dataclass(frozen=True)
class WanLayout:
    """What the checkpoint's JSON files say, read without loading any weights."""

    class_name: str
    boundary_ratio: float | None
    expand_timesteps: bool
    two_experts: bool
    vae_spatial: int
    vae_temporal: int
    patch: tuple[int, int, int]
    in_channels: int
    z_dim: int
    image_dim: int | None
    #: Rotary positions the transformer has per axis (frames, height, width) in patches:
    #: 1024 on the published checkpoints, fewer on small test ones.
    rope_positions: int = 1024

    @property
    def image_to_video(self) -> bool:
        return self.class_name == "WanImageToVideoPipeline"

    @property
    def default_fps(self) -> int:
        """Frames per second of the reference: 24 for Wan2.2 TI2V-5B, 16 for the others."""
        return 24 if self.expand_timesteps else 16

    @property
    def size_multiple(self) -> tuple[int, int]:
        return (self.vae_spatial * self.patch[1], self.vae_spatial * self.patch[2])

    @property
    def variant(self) -> str:
        if self.image_to_video:
            return "i2v-a14b" if self.two_experts else "i2v"
        if self.expand_timesteps:
            return "ti2v"
        return "t2v-a14b" if self.two_experts else "t2v"

    @classmethod
    def read(cls, path: Path) -> WanLayout:
        try:
            index = json.loads((path / "model_index.json").read_text())
            transformer_dir = "transformer" if present(index, "transformer") else "transformer_2"
            transformer = json.loads((path / transformer_dir / "config.json").read_text())
            vae = json.loads((path / "vae" / "config.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelNotFoundError(f"{path}: not a Wan diffusers checkpoint: {exc}") from None
        return cls(
            class_name=index.get("_class_name", "WanPipeline"),
            boundary_ratio=index.get("boundary_ratio"),
            expand_timesteps=bool(index.get("expand_timesteps", False)),
            two_experts=present(index, "transformer") and present(index, "transformer_2"),
            vae_spatial=int(vae.get("scale_factor_spatial") or 8),
            vae_temporal=int(vae.get("scale_factor_temporal") or 4),
            patch=tuple(transformer.get("patch_size", (1, 2, 2))),  # type: ignore[arg-type]
            in_channels=int(transformer.get("in_channels", 16)),
            z_dim=int(vae.get("z_dim", 16)),
            image_dim=transformer.get("image_dim"),
            rope_positions=int(transformer.get("rope_max_seq_len") or 1024),
        )

    def position_error(self, height: int, width: int, frames: int) -> InvalidRequestError | None:
        """Why the transformer has no rotary position for part of a ``height`` x ``width`` x
        ``frames`` video (diffusers would fail mid-forward with a shape error), or None."""
        limit = self.rope_positions
        mh, mw = self.size_multiple
        largest_frames = (limit * self.patch[0] - 1) * self.vae_temporal + 1
        for name, value, largest in (
            ("height", height, limit * mh),
            ("width", width, limit * mw),
            ("num_frames", frames, largest_frames),
        ):
            if value > largest:
                return InvalidRequestError(
                    f"{name} {value} is above the {largest} this checkpoint takes (its "
                    f"transformer has rotary positions for {limit} patches per axis, "
                    "rope_max_seq_len)",
                    param=name,
                )
        return None

    def warmup_size(self) -> dict[str, int]:
        """The size of the server's warm-up: the default one when this checkpoint takes it,
        else the smallest video it makes (one latent frame after the first, one patch)."""
        if self.position_error(DEFAULT_HEIGHT, DEFAULT_WIDTH, DEFAULT_FRAMES) is None:
            return {}
        mh, mw = self.size_multiple
        return {"height": mh, "width": mw, "num_frames": self.vae_temporal + 1}

    def check(self, request: GenerationRequest) -> GenerationRequest:
        """Complete defaults and reject what Wan cannot do, before any compute."""
        extras = parse_extras(request.extras)
        height = request.height or DEFAULT_HEIGHT
        width = request.width or DEFAULT_WIDTH
        frames = request.num_frames or DEFAULT_FRAMES
        mh, mw = self.size_multiple
        for name, value, multiple in (("height", height, mh), ("width", width, mw)):
            if value % multiple:
                raise InvalidRequestError(
                    f"{name} {value} is not divisible by {multiple} (VAE factor "
                    f"{self.vae_spatial} x patch {multiple // self.vae_spatial}); try "
                    f"{max(multiple, round(value / multiple) * multiple)}",
                    param=name,
                )
        if (frames - 1) % self.vae_temporal:
            k = max(0, round((frames - 1) / self.vae_temporal))
            raise InvalidRequestError(
                f"num_frames {frames} must be {self.vae_temporal}k+1 (e.g. 5, 17, 49, 81, 121); "
                f"try {k * self.vae_temporal + 1}",
                param="num_frames",
            )
        if request.num_outputs != 1:
            raise InvalidRequestError(
                "Wan generates one video per request; send several requests instead",
                param="n",
            )
        images = list(request.images)
        if self.image_to_video and len(images) != 1:
            raise InvalidRequestError(
                f"this is an image-to-video checkpoint ({self.variant}): give exactly one "
                f"conditioning image (got {len(images)})",
                param="image",
            )
        if not self.image_to_video and not self.expand_timesteps and images:
            raise InvalidRequestError(
                f"this text-to-video checkpoint ({self.variant}) takes no image; use a Wan I2V "
                "or TI2V checkpoint for image conditioning",
                param="image",
            )
        if len(images) > 1:
            raise InvalidRequestError("Wan takes at most one conditioning image", param="image")
        for image in images:
            if not hasattr(image, "convert") or not hasattr(image, "size"):
                raise InvalidRequestError("image must be a PIL image", param="image")
        boundary = extras.boundary_ratio if extras.boundary_ratio is not None else None
        if boundary is not None and not self.two_experts:
            raise InvalidRequestError(
                "boundary_ratio needs a two-expert (Wan2.2 A14B) checkpoint",
                param="boundary_ratio",
            )
        if extras.guidance_scale_2 is not None and not (
            self.two_experts and (boundary or self.boundary_ratio) is not None
        ):
            raise InvalidRequestError(
                "guidance_scale_2 is only used by two-expert (Wan2.2 A14B) checkpoints",
                param="guidance_scale_2",
            )
        if self.image_dim is not None and extras.max_sequence_length != I2V_TEXT_TOKENS:
            raise InvalidRequestError(
                f"Wan2.1 I2V needs max_sequence_length={I2V_TEXT_TOKENS}",
                param="max_sequence_length",
            )
        # last: a default size too large for a small checkpoint is reported after what the
        # request itself got wrong
        problem = self.position_error(height, width, frames)
        if problem is not None:
            raise problem
        return request.model_copy(
            update={
                "height": height,
                "width": width,
                "num_frames": frames,
                "num_inference_steps": request.num_inference_steps or DEFAULT_STEPS,
                "guidance_scale": (
                    request.guidance_scale
                    if request.guidance_scale is not None
                    else DEFAULT_GUIDANCE
                ),
                "images": images,
                "extras": extras.model_dump(),
            }
        )


def parse_extras(extras: dict[str, Any]) -> WanExtras:
    """Validate Wan's extras; an unknown or bad one is an InvalidRequestError naming it."""
    from pydantic import ValidationError

    try:
        return WanExtras.model_validate(extras)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = ".".join(str(p) for p in first["loc"]) or "extras"
        if first["type"] == "extra_forbidden":
            known = ", ".join(WanExtras.model_fields)
            message = f"unknown extra {name!r} for Wan; known extras: {known}"
        else:
            message = f"extras.{name}: {first['msg']}"
        raise InvalidRequestError(message, param=name) from None


def present(index: dict[str, Any], name: str) -> bool:
    """Whether ``model_index.json`` lists component ``name`` (``[library, class]``, not null)."""
    entry = index.get(name)
    return isinstance(entry, list) and len(entry) == 2 and entry[0] is not None


def is_checked(request: GenerationRequest) -> bool:
    """Whether ``request`` is what :meth:`WanLayout.check` returns: every default filled in and
    every extra present (``check`` dumps them all). Cheap; lets ``prepare`` trust the request
    the core validated and still validate a raw one (benchmarks, tests)."""
    return (
        None
        not in (
            request.height,
            request.width,
            request.num_frames,
            request.num_inference_steps,
            request.guidance_scale,
        )
        and request.extras.keys() == WanExtras.model_fields.keys()
    )
