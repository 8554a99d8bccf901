"""``omni serve``'s limits on what one request may ask for (``--max-steps``, ``--max-pixels``,
``--max-frames``, ``--max-outputs``, ``--max-aspect-ratio``, ``--max-cost``,
``--max-upload-pixels``), documented in sdk-docs/docs/operations.md."""

from __future__ import annotations

import functools
from typing import Any

import click

from omni_core.serving.config import (
    DEFAULT_MAX_ASPECT_RATIO,
    DEFAULT_MAX_COST,
    DEFAULT_MAX_FRAMES,
    DEFAULT_MAX_OUTPUTS,
    DEFAULT_MAX_PIXELS,
    DEFAULT_MAX_STEPS,
    DEFAULT_MAX_UPLOAD_PIXELS,
)

#: The flags that ``0`` turns off (their ServerConfig field is then None).
_OFF_AT_ZERO = ("max_steps", "max_pixels", "max_frames", "max_outputs", "max_aspect_ratio")


def limit_options(func: Any) -> Any:
    """The limit flags; the command receives them in one ``limits`` keyword: the
    :class:`~omni_core.serving.config.ServerConfig` fields they set."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        limits: dict[str, Any] = {key: kwargs.pop(key) or None for key in _OFF_AT_ZERO}
        limits["max_cost"] = kwargs.pop("max_cost") or None
        limits["max_upload_pixels"] = kwargs.pop("max_upload_pixels")
        return func(*args, limits=limits, **kwargs)

    options = [
        click.option(
            "--max-steps",
            type=click.IntRange(0),
            default=DEFAULT_MAX_STEPS,
            show_default=True,
            help="Reject requests with more denoising steps (400). 0: no limit (likewise below).",
        ),
        click.option(
            "--max-pixels",
            type=click.IntRange(0),
            default=DEFAULT_MAX_PIXELS,
            show_default=True,
            help="Reject images/videos larger than this many pixels per frame (400).",
        ),
        click.option(
            "--max-frames",
            type=click.IntRange(0),
            default=DEFAULT_MAX_FRAMES,
            show_default=True,
            help="Reject videos with more frames (400).",
        ),
        click.option(
            "--max-outputs",
            type=click.IntRange(0),
            default=DEFAULT_MAX_OUTPUTS,
            show_default=True,
            help="Reject requests for more images at once (n; 400).",
        ),
        click.option(
            "--max-aspect-ratio",
            type=click.FloatRange(0),
            default=DEFAULT_MAX_ASPECT_RATIO,
            show_default=True,
            help="Reject sizes whose long side exceeds the short side this many times (400).",
        ),
        click.option(
            "--max-cost",
            type=click.IntRange(0),
            default=DEFAULT_MAX_COST,
            show_default=True,
            help="Reject requests above this many pixel-steps: "
            "width x height x frames x steps x n.",
        ),
        click.option(
            "--max-upload-pixels",
            type=click.IntRange(1),
            default=DEFAULT_MAX_UPLOAD_PIXELS,
            show_default=True,
            help="Decoded pixels of all input images of a request, read from their headers: "
            "JPEGs above it decode reduced, other images are refused (413).",
        ),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper
