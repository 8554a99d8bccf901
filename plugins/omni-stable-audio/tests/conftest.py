"""Session fixtures: the tiny Stable Audio checkpoint (built once), omni's pipeline and
diffusers' own ``StableAudioPipeline`` on it (each loaded once, on first use)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def audio_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from omni_stable_audio.testing import build_tiny_stable_audio

    torch.set_num_threads(2)
    return build_tiny_stable_audio(tmp_path_factory.mktemp("stable-audio") / "tiny")


@pytest.fixture(scope="session")
def audio_model(audio_checkpoint: Path) -> Any:
    """``Omni`` on the tiny checkpoint (CPU, float32)."""
    from omni_core import Omni

    return Omni(audio_checkpoint, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def audio_reference(audio_checkpoint: Path) -> Any:
    """diffusers' own StableAudioPipeline on the same checkpoint."""
    import diffusers

    pipe = diffusers.StableAudioPipeline.from_pretrained(audio_checkpoint)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _reference_audio(pipe: Any, seed: int, **kwargs: Any) -> Any:
    """diffusers' clip as ``[samples, channels]`` float32, with omni's noise (the CPU
    generator of ``seed``)."""
    import torch

    with warnings.catch_warnings():  # torchsde's float-rounding notes on its interval ends
        warnings.simplefilter("ignore", UserWarning)
        out = pipe(**kwargs, generator=torch.Generator("cpu").manual_seed(seed)).audios
    return out[0].float().numpy().T


@pytest.fixture(scope="session")
def reference_audio() -> Any:
    """``reference_audio(pipe, seed, **kwargs)``: diffusers' waveform ([samples, channels])."""
    return _reference_audio
