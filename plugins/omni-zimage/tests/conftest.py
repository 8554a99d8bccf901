"""Session fixtures: the tiny Z-Image checkpoint (built once), omni's pipeline and diffusers' own
``ZImagePipeline`` on it (each loaded once, on first use)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def zimage_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    from omni_zimage.testing import build_tiny_zimage

    torch.set_num_threads(2)
    return build_tiny_zimage(tmp_path_factory.mktemp("zimage") / "tiny")


@pytest.fixture(scope="session")
def zimage_model(zimage_checkpoint: Path) -> Any:
    """``Omni`` on the tiny checkpoint (CPU, float32)."""
    from omni_core import Omni

    return Omni(zimage_checkpoint, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def zimage_reference(zimage_checkpoint: Path) -> Any:
    """diffusers' own ZImagePipeline on the same checkpoint."""
    import diffusers

    pipe = diffusers.ZImagePipeline.from_pretrained(zimage_checkpoint)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _reference_images(pipe: Any, seed: int, **kwargs: Any) -> list[Any]:
    import torch

    return pipe(**kwargs, generator=torch.Generator("cpu").manual_seed(seed)).images


def _worst_difference(ours: list[Any], reference: list[Any]) -> int:
    import numpy as np

    assert len(ours) == len(reference)
    worst = 0
    for a, b in zip(ours, reference, strict=True):
        assert a.size == b.size
        pa, pb = np.asarray(a).astype(int), np.asarray(b).astype(int)
        assert pa.std() > 5, "degenerate image: the comparison would prove nothing"
        worst = max(worst, int(np.abs(pa - pb).max()))
    return worst


@pytest.fixture(scope="session")
def reference_images() -> Any:
    """``reference_images(pipe, seed, **kwargs)``: diffusers' images with omni's noise (the CPU
    generator of ``seed``)."""
    return _reference_images


@pytest.fixture(scope="session")
def worst_difference() -> Any:
    """``worst_difference(ours, reference)``: the largest pixel difference in 1/255 steps
    (every image must have structure, or the comparison would prove nothing)."""
    return _worst_difference
