"""Z-Image on two gloo CPU processes: ``cfg_parallel_size=2`` (the stacked rows of a CFG
request split over the ranks: the conditional row on one, the unconditional on the other)
reproduces the single-process image, every pixel within 1/255."""

from __future__ import annotations

import numpy as np
import pytest

from omni_core import Omni

KW = {"height": 64, "width": 64, "num_inference_steps": 2, "max_sequence_length": 64}
CFG = {"guidance_scale": 4.0, "negative_prompt": "blurry", "seed": 9}


@pytest.mark.slow
def test_cfg_parallel_matches_one_process(zimage_checkpoint, zimage_model) -> None:
    single = zimage_model.generate("a lighthouse at dusk", **KW, **CFG)
    assert single.info["cfg"] is True
    with Omni(zimage_checkpoint, dtype="float32", cfg_parallel_size=2) as omni:
        assert omni.healthy
        result = omni.generate("a lighthouse at dusk", **KW, **CFG)
    assert result.info["parallel"]["world_size"] == 2
    got = np.asarray(result.images[0]).astype(np.int16)
    want = np.asarray(single.images[0]).astype(np.int16)
    assert got.shape == want.shape and want.std() > 5
    assert np.abs(got - want).max() <= 1


def test_ulysses_is_refused_before_any_worker_starts(zimage_checkpoint) -> None:
    from omni_core import ConfigError

    with pytest.raises(ConfigError, match="z-image"):
        Omni(zimage_checkpoint, ulysses_degree=2, dtype="float32")
