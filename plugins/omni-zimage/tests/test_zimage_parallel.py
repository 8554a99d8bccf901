"""Z-Image on two gloo CPU processes: ``cfg_parallel_size=2`` (the stacked rows of a CFG
request split over the ranks: the conditional row on one, the unconditional on the other) and
``ulysses_degree=2`` (the unified image + caption sequence cut through the main layers, its
padding mask gathered for the whole sequence; the refiners run whole on every rank) reproduce
the single-process image, every pixel within 1/255. A step cache with Ulysses is refused before
any worker starts (the ranks' skip decisions would diverge)."""

from __future__ import annotations

import numpy as np
import pytest

from omni_core import Omni

KW = {"height": 64, "width": 64, "num_inference_steps": 2, "max_sequence_length": 64}
CFG = {"guidance_scale": 4.0, "negative_prompt": "blurry", "seed": 9}


@pytest.mark.slow
@pytest.mark.parametrize("layout", [{"cfg_parallel_size": 2}, {"ulysses_degree": 2}], ids=str)
def test_parallel_layout_matches_one_process(layout, zimage_checkpoint, zimage_model) -> None:
    single = zimage_model.generate("a lighthouse at dusk", **KW, **CFG)
    assert single.info["cfg"] is True
    with Omni(zimage_checkpoint, dtype="float32", **layout) as omni:
        assert omni.healthy
        result = omni.generate("a lighthouse at dusk", **KW, **CFG)
    parallel = result.info["parallel"]
    assert parallel["world_size"] == 2
    if "ulysses_degree" in layout:  # one forward of both CFG rows, its sequence cut in two
        (shards,) = parallel["sequence_shards"]
        assert len(shards) == 2 and min(shards) > 0
    got = np.asarray(result.images[0]).astype(np.int16)
    want = np.asarray(single.images[0]).astype(np.int16)
    assert got.shape == want.shape and want.std() > 5
    assert np.abs(got - want).max() <= 1


def test_a_step_cache_with_ulysses_is_refused_before_any_worker_starts(zimage_checkpoint) -> None:
    from omni_core import ConfigError

    with pytest.raises(ConfigError, match="cannot be combined with ulysses"):
        Omni(zimage_checkpoint, ulysses_degree=2, dtype="float32", cache="first-block")
