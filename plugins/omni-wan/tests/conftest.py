"""Session fixtures for the omni-wan tests: tiny checkpoints and loaded pipelines, built once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: Small but real settings: 9 frames (3 latent frames), 4 UniPC steps, CFG on.
SETTINGS: dict[str, Any] = {
    "prompt": "a cat walks on the grass",
    "negative_prompt": "blurry, static",
    "num_frames": 9,
    "num_inference_steps": 4,
    "guidance_scale": 4.0,
}
SIZES = {"ti2v": (32, 64)}  # (height, width): TI2V's VAE x patch factor is 32, the rest 16


def size_of(variant: str) -> dict[str, int]:
    height, width = SIZES.get(variant, (16, 32))
    return {"height": height, "width": width}


@pytest.fixture(scope="session")
def wan_kwargs() -> Any:
    """``wan_kwargs(variant, **overrides) -> dict``: the shared test settings for a variant."""

    def make(variant: str, **overrides: Any) -> dict[str, Any]:
        return {**SETTINGS, **size_of(variant), **overrides}

    return make


@pytest.fixture(scope="session")
def tiny_wan(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``tiny_wan(variant) -> Path``: each tiny checkpoint is built once per session."""
    from omni_wan.testing import build_tiny_wan

    root = tmp_path_factory.mktemp("wan")
    built: dict[str, Path] = {}

    def get(variant: str) -> Path:
        if variant not in built:
            built[variant] = build_tiny_wan(root / variant, variant)
        return built[variant]

    return get


@pytest.fixture(scope="session")
def omni_wan_model(tiny_wan: Any) -> Any:
    """``omni_wan_model(variant) -> Omni``: loaded once per session (CPU, float32)."""
    from omni_core import Omni

    loaded: dict[str, Any] = {}

    def get(variant: str) -> Any:
        if variant not in loaded:
            loaded[variant] = Omni(tiny_wan(variant), device="cpu", dtype="float32")
        return loaded[variant]

    return get


@pytest.fixture(scope="session")
def cond_image() -> Any:
    """A deterministic RGB conditioning image whose size differs from the output size."""
    import numpy as np
    from PIL import Image

    pixels = (np.random.RandomState(0).rand(40, 50, 3) * 255).astype("uint8")
    return Image.fromarray(pixels)
