"""Session fixtures: tiny FLUX checkpoints (built once), omni pipelines and diffusers' own
pipelines on them (loaded once each, on first use)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: Small but real settings: 64x64 (16 image tokens), 2 steps, 32 T5 tokens.
SMALL: dict[str, Any] = {"height": 64, "width": 64, "num_inference_steps": 2}
T5_TOKENS = 32


class _Lazy(dict):
    """A dict that builds a missing key with ``make(key)`` (and keeps it)."""

    def __init__(self, make: Any) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, key: str) -> Any:
        value = self[key] = self._make(key)
        return value


@pytest.fixture(scope="session")
def flux_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``flux_checkpoints[variant]``: the tiny checkpoint of ``variant``, built on first use."""
    import torch

    from omni_flux.testing import build_tiny_flux

    torch.set_num_threads(2)
    root = tmp_path_factory.mktemp("flux")
    return _Lazy(lambda variant: build_tiny_flux(root / variant, variant))


@pytest.fixture(scope="session")
def flux_models(flux_checkpoints: dict[str, Path]) -> dict[str, Any]:
    """``flux_models[variant]``: ``Omni`` on the tiny checkpoint (CPU, float32)."""
    from omni_core import Omni

    return _Lazy(lambda variant: Omni(flux_checkpoints[variant], device="cpu", dtype="float32"))


@pytest.fixture(scope="session")
def flux_references(flux_checkpoints: dict[str, Path]) -> dict[str, Any]:
    """``flux_references[variant]``: diffusers' own pipeline on the same checkpoint."""
    import diffusers

    def load(variant: str) -> Any:
        path = flux_checkpoints[variant]
        if variant == "flux2":
            pipe = _flux2_reference(path)
        else:
            cls = {
                "kontext": diffusers.FluxKontextPipeline,
                "flux2-klein": diffusers.Flux2KleinPipeline,
            }.get(variant, diffusers.FluxPipeline)
            pipe = cls.from_pretrained(path)
        pipe.set_progress_bar_config(disable=True)
        return pipe

    return _Lazy(load)


def _flux2_reference(path: Path) -> Any:
    """diffusers' Flux2Pipeline from its parts: its ``from_pretrained`` cannot load the
    PixtralProcessor folder without torchvision, so it gets the folder's tokenizer (the same
    chat template; what omni_flux.compat loads) and diffusers' own classes for the rest."""
    import diffusers
    from transformers import Mistral3ForConditionalGeneration

    from omni_flux.compat import load_mistral_processor

    return diffusers.Flux2Pipeline(
        scheduler=diffusers.FlowMatchEulerDiscreteScheduler.from_pretrained(path / "scheduler"),
        vae=diffusers.AutoencoderKLFlux2.from_pretrained(path / "vae"),
        text_encoder=Mistral3ForConditionalGeneration.from_pretrained(path / "text_encoder"),
        tokenizer=load_mistral_processor(path / "tokenizer"),
        transformer=diffusers.Flux2Transformer2DModel.from_pretrained(path / "transformer"),
    )


@pytest.fixture(scope="session")
def flux_image() -> Any:
    """A deterministic 120x80 RGB input image (3:2, not a multiple of 16 in height)."""
    import numpy as np
    from PIL import Image

    pixels = (np.random.RandomState(0).rand(80, 120, 3) * 255).astype(np.uint8)
    return Image.fromarray(pixels)


def _run_reference(pipe: Any, seed: int, **kwargs: Any) -> list[Any]:
    import torch

    return pipe(**kwargs, generator=torch.Generator("cpu").manual_seed(seed)).images


def _assert_same(ours: list[Any], reference: list[Any]) -> int:
    import numpy as np

    assert len(ours) == len(reference)
    worst = 0
    for a, b in zip(ours, reference, strict=True):
        assert a.size == b.size
        pa, pb = np.asarray(a).astype(int), np.asarray(b).astype(int)
        assert pa.std() > 5, "degenerate image: the comparison would prove nothing"
        worst = max(worst, int(np.abs(pa - pb).max()))
    assert worst <= 1, f"{worst}/255 away from diffusers"
    return worst


@pytest.fixture(scope="session")
def run_reference() -> Any:
    """``run_reference(pipe, seed, **kwargs)``: diffusers' images with omni's noise (the CPU
    generator of ``seed``)."""
    return _run_reference


@pytest.fixture(scope="session")
def assert_same() -> Any:
    """``assert_same(ours, reference)``: every image within 1/255 of diffusers' and not
    degenerate; returns the largest difference (in 1/255 steps)."""
    return _assert_same
