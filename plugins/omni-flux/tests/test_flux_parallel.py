"""FLUX on two gloo CPU processes: ``cfg_parallel_size=2`` (the batched CFG rows split over
the ranks) and ``ulysses_degree=2`` (the image tokens cut through the double- and single-stream
blocks, text replicated) reproduce the single-process image, every pixel within 1/255.

80x80 gives 25 image tokens, uneven over 2 ranks (13 + 12); FLUX.1 runs true CFG (so the CFG
layout has rows to split) and FLUX.2-klein its real CFG (the Ulysses shards then carry both
branches' rows). CFG-parallel is the core's batch split, the same for every family: FLUX.1's
run stands for it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omni_core import Omni

REQUESTS: dict[str, dict[str, Any]] = {
    "dev": {"negative_prompt": "blurry", "true_cfg_scale": 3.0, "guidance_scale": 4.0},
    "flux2-klein": {"guidance_scale": 3.0},
}
COMMON = {"height": 80, "width": 80, "num_inference_steps": 2, "max_sequence_length": 32}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variant", "layout", "shards"),
    [
        ("dev", {"cfg_parallel_size": 2}, None),
        ("dev", {"ulysses_degree": 2}, [[13, 12]]),
        ("flux2-klein", {"ulysses_degree": 2}, [[13, 12]]),  # its own plan: joint single blocks
    ],
    ids=["flux1-cfg2", "flux1-ulysses2", "flux2-klein-ulysses2"],
)
def test_parallel_layout_matches_one_process(
    variant, layout, shards, flux_checkpoints, flux_models
) -> None:
    kwargs = {**COMMON, **REQUESTS[variant], "seed": 9}
    single = flux_models[variant].generate("a lighthouse at dusk", **kwargs)
    assert single.info["cfg"] is True
    with Omni(flux_checkpoints[variant], dtype="float32", **layout) as omni:
        assert omni.healthy
        result = omni.generate("a lighthouse at dusk", **kwargs)
    assert not omni.healthy  # the with block stopped the workers
    parallel = result.info["parallel"]
    assert parallel["world_size"] == 2
    assert parallel.get("sequence_shards") == shards
    got = np.asarray(result.images[0]).astype(np.int16)
    want = np.asarray(single.images[0]).astype(np.int16)
    assert got.shape == want.shape and want.std() > 5
    assert np.abs(got - want).max() <= 1


def test_a_layout_the_heads_cannot_take_is_refused(flux_checkpoints) -> None:
    """Checked before any worker starts: the tiny transformer has 2 attention heads."""
    from omni_core import ConfigError

    with pytest.raises(ConfigError, match="does not divide"):
        Omni(flux_checkpoints["dev"], ulysses_degree=4, dtype="float32")
