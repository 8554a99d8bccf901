"""Session fixtures: the tiny LTX-2 checkpoints (built once), omni's pipeline and diffusers' own
``LTX2Pipeline`` / ``LTX2ImageToVideoPipeline`` on them (each loaded once, on first use)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def ltx_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    from omni_ltx.testing import build_tiny_ltx2

    torch.set_num_threads(2)
    return build_tiny_ltx2(tmp_path_factory.mktemp("ltx") / "tiny")


@pytest.fixture(scope="session")
def ltx_model(ltx_checkpoint: Path) -> Any:
    """``Omni`` on the tiny checkpoint (CPU, float32)."""
    from omni_core import Omni

    return Omni(ltx_checkpoint, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def ltx_reference(ltx_checkpoint: Path) -> Any:
    """diffusers' own LTX2Pipeline on the same checkpoint."""
    import diffusers

    pipe = diffusers.LTX2Pipeline.from_pretrained(ltx_checkpoint)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="session")
def ltx_i2v_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_ltx.testing import build_tiny_ltx2

    return build_tiny_ltx2(tmp_path_factory.mktemp("ltx-i2v") / "tiny", image_to_video=True)


@pytest.fixture(scope="session")
def ltx_i2v_model(ltx_i2v_checkpoint: Path) -> Any:
    from omni_core import Omni

    return Omni(ltx_i2v_checkpoint, device="cpu", dtype="float32")


def _reference(pipe: Any, seed: int, **kwargs: Any) -> tuple[Any, Any]:
    """diffusers' frames (uint8-scaled floats, ``[F, H, W, 3]``) and sound
    (``[samples, channels]``) with omni's noise."""
    import torch

    generator = torch.Generator("cpu").manual_seed(seed)
    out = pipe(**kwargs, generator=generator, output_type="np")
    return out.frames[0] * 255, out.audio[0].float().numpy().T


def _worst_difference(ours: Any, reference: Any) -> float:
    import numpy as np

    assert ours.shape == reference.shape
    assert np.asarray(reference).std() > 5, "degenerate video: the comparison proves nothing"
    return float(np.abs(np.asarray(ours, dtype=np.float64) - reference).max())


def _worst_audio(ours: Any, reference: Any) -> float:
    import numpy as np

    assert ours.shape == reference.shape
    assert np.asarray(reference).std() > 1e-3, "silent audio: the comparison proves nothing"
    return float(np.abs(np.asarray(ours, dtype=np.float64) - reference).max())


@pytest.fixture(scope="session")
def reference() -> Any:
    """``reference(pipe, seed, **kwargs)``: diffusers' frames in 0-255 and its sound."""
    return _reference


@pytest.fixture(scope="session")
def worst_difference() -> Any:
    """``worst_difference(ours, reference)``: the largest pixel difference in 1/255 steps
    (the reference must have structure, or the comparison would prove nothing)."""
    return _worst_difference


@pytest.fixture(scope="session")
def worst_audio() -> Any:
    """``worst_audio(ours, reference)``: the largest sample difference (the reference must
    not be silent)."""
    return _worst_audio


class _Forwards:
    """Counts the transformer's forward calls and the rows of each."""

    def __init__(self, module: Any) -> None:
        self.rows: list[int] = []
        self.handle = module.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: Any, args: Any, kwargs: Any) -> None:
        self.rows.append(int(kwargs["hidden_states"].shape[0]))

    def __enter__(self) -> _Forwards:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.handle.remove()


@pytest.fixture(scope="session")
def forwards() -> Any:
    """``with forwards(transformer) as calls``: ``calls.rows``, the rows of each forward."""
    return _Forwards


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
