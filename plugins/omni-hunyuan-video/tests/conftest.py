"""Session fixtures: the tiny HunyuanVideo-1.5 checkpoint (built once), omni's pipeline and
diffusers' own ``HunyuanVideo15Pipeline`` on it (each loaded once, on first use)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def hunyuan_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    from omni_hunyuan_video.testing import build_tiny_hunyuan_video15

    torch.set_num_threads(2)
    return build_tiny_hunyuan_video15(tmp_path_factory.mktemp("hunyuan") / "tiny")


@pytest.fixture(scope="session")
def hunyuan_model(hunyuan_checkpoint: Path) -> Any:
    """``Omni`` on the tiny checkpoint (CPU, float32)."""
    from omni_core import Omni

    return Omni(hunyuan_checkpoint, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def hunyuan_reference(hunyuan_checkpoint: Path) -> Any:
    """diffusers' own HunyuanVideo15Pipeline on the same checkpoint."""
    import diffusers

    pipe = diffusers.HunyuanVideo15Pipeline.from_pretrained(hunyuan_checkpoint)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _reference_frames(pipe: Any, seed: int, guidance_scale: float, **kwargs: Any) -> Any:
    """diffusers' frames (uint8-scaled floats, ``[F, H, W, 3]``) with omni's noise; diffusers
    takes its CFG scale from the guider, so the test sets one of that scale."""
    import diffusers
    import torch

    pipe.guider = diffusers.ClassifierFreeGuidance(guidance_scale=guidance_scale)
    generator = torch.Generator("cpu").manual_seed(seed)
    return pipe(**kwargs, generator=generator).frames[0] * 255


def _worst_difference(ours: Any, reference: Any) -> float:
    import numpy as np

    assert ours.shape == reference.shape
    assert np.asarray(reference).std() > 5, "degenerate video: the comparison proves nothing"
    return float(np.abs(np.asarray(ours, dtype=np.float64) - reference).max())


@pytest.fixture(scope="session")
def reference_frames() -> Any:
    """``reference_frames(pipe, seed, guidance_scale, **kwargs)``: diffusers' frames in 0-255."""
    return _reference_frames


@pytest.fixture(scope="session")
def worst_difference() -> Any:
    """``worst_difference(ours, reference)``: the largest pixel difference in 1/255 steps
    (the reference must have structure, or the comparison would prove nothing)."""
    return _worst_difference


@pytest.fixture(scope="session")
def hunyuan_i2v_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_hunyuan_video.testing import build_tiny_hunyuan_video15

    path = tmp_path_factory.mktemp("hunyuan-i2v") / "tiny"
    return build_tiny_hunyuan_video15(path, image_to_video=True)


@pytest.fixture(scope="session")
def hunyuan_i2v_model(hunyuan_i2v_checkpoint: Path) -> Any:
    """``Omni`` on the tiny image-to-video checkpoint (CPU, float32)."""
    from omni_core import Omni

    return Omni(hunyuan_i2v_checkpoint, device="cpu", dtype="float32")


def _blocks(video: Any, side: int = 8) -> Any:
    import numpy as np

    f, h, w, c = video.shape
    return (
        np.asarray(video, dtype=float)
        .reshape(f, h // side, side, w // side, side, c)
        .mean(axis=(2, 4))
    )


@pytest.fixture(scope="session")
def blocks() -> Any:
    """``blocks(video)``: means of 8x8 pixel blocks, what survives H.264 of the tiny model's
    texture-like frames (crf 18 keeps the low frequencies, not the per-pixel noise)."""
    return _blocks
