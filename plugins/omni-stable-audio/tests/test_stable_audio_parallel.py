"""Stable Audio on two gloo CPU processes: ``cfg_parallel_size=2`` (the ``[uncond; cond]`` rows
of a CFG request split over the ranks) reproduces the single-process clip within 1e-4 (the
waveform is float32); Ulysses, which has no sequence plan here (the DiT's attention processor
calls torch's SDPA itself, so omni cannot route it: see ``omni_stable_audio.denoiser``), is
refused before any worker starts."""

from __future__ import annotations

import numpy as np
import pytest

from omni_core import Omni

KW = {"duration_s": 0.2, "num_inference_steps": 3, "guidance_scale": 5.0, "seed": 9}


@pytest.mark.slow
def test_cfg_parallel_matches_one_process(audio_checkpoint, audio_model) -> None:
    single = audio_model.generate("a dog barking in the rain", negative_prompt="noise", **KW)
    assert single.info["cfg"] is True
    with Omni(audio_checkpoint, dtype="float32", cfg_parallel_size=2) as omni:
        assert omni.healthy
        result = omni.generate("a dog barking in the rain", negative_prompt="noise", **KW)
    assert result.info["parallel"]["world_size"] == 2
    assert result.audio.shape == single.audio.shape and single.audio.std() > 0.05
    assert float(np.abs(result.audio - single.audio).max()) <= 1e-4


def test_ulysses_is_refused_before_any_worker_starts(audio_checkpoint) -> None:
    from omni_core import ConfigError

    with pytest.raises(ConfigError, match="stable-audio"):
        Omni(audio_checkpoint, ulysses_degree=2, dtype="float32")
