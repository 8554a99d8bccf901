"""Omni(..., cfg_parallel_size=2): two gloo worker processes split every forward's rows (the
conditional and unconditional rows of a step on one rank each; the video and the audio
predictions both gathered) and match one process."""

from __future__ import annotations

import numpy as np

from omni_core import Omni

KW = {"height": 32, "width": 64, "num_frames": 5, "num_inference_steps": 2}


def test_cfg_parallel_matches_one_process(ltx_checkpoint, ltx_model) -> None:
    single = ltx_model.generate("a red cat", seed=9, negative_prompt="blurry", **KW)
    with Omni(ltx_checkpoint, cfg_parallel_size=2, dtype="float32") as omni:
        assert omni.healthy
        result = omni.generate("a red cat", seed=9, negative_prompt="blurry", **KW)
        assert result.info["parallel"]["world_size"] == 2
    diff = np.abs(result.video.astype(np.int16) - single.video.astype(np.int16))
    assert diff.max() <= 1
    assert result.audio.shape == single.audio.shape
    assert np.abs(result.audio - single.audio).max() <= 1e-4
