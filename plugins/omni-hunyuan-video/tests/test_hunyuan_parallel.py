"""HunyuanVideo-1.5 on two gloo CPU processes: ``cfg_parallel_size=2`` (the ``[cond; uncond]``
rows of a CFG request split over the ranks) reproduces the single-process video, every pixel
within 1/255; Ulysses, which has no sequence plan here, is refused before any worker starts."""

from __future__ import annotations

import numpy as np
import pytest

from omni_core import Omni

KW = {"height": 32, "width": 48, "num_frames": 5, "num_inference_steps": 2}
CFG = {"guidance_scale": 5.0, "negative_prompt": "blurry", "seed": 9}


@pytest.mark.slow
def test_cfg_parallel_matches_one_process(hunyuan_checkpoint, hunyuan_model) -> None:
    single = hunyuan_model.generate("a red cat walks on the grass", **KW, **CFG)
    assert single.info["cfg"] is True
    with Omni(hunyuan_checkpoint, dtype="float32", cfg_parallel_size=2) as omni:
        assert omni.healthy
        result = omni.generate("a red cat walks on the grass", **KW, **CFG)
    assert result.info["parallel"]["world_size"] == 2
    got, want = result.video.astype(np.int16), single.video.astype(np.int16)
    assert got.shape == want.shape and want.std() > 5
    assert np.abs(got - want).max() <= 1


def test_ulysses_is_refused_before_any_worker_starts(hunyuan_checkpoint) -> None:
    from omni_core import ConfigError

    with pytest.raises(ConfigError, match="hunyuan"):
        Omni(hunyuan_checkpoint, ulysses_degree=2, dtype="float32")
