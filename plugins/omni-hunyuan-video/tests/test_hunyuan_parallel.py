"""HunyuanVideo-1.5 on two gloo CPU processes: ``cfg_parallel_size=2`` (the ``[cond; uncond]``
rows of a CFG request split over the ranks) and ``ulysses_degree=2`` (the video tokens cut
through the double-stream blocks, the text tokens replicated and last in the joint attention,
their padding mask rebuilt for the whole sequence) reproduce the single-process video, every
pixel within 1/255.

48x48 px and 9 frames give 3x3x3 = 27 video tokens, uneven over 2 ranks (14 + 13); the request
runs CFG, so the Ulysses shards carry both branches' rows. A step cache with Ulysses is refused
before any worker starts (the ranks' skip decisions would diverge).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omni_core import ConfigError, Omni

KW: dict[str, Any] = {"height": 48, "width": 48, "num_frames": 9, "num_inference_steps": 2}
CFG = {"guidance_scale": 5.0, "negative_prompt": "blurry", "seed": 9}
PROMPT = 'a shop sign that says "OPEN"'  # glyph tokens too: more text, more of it masked


@pytest.mark.slow
@pytest.mark.parametrize(
    ("layout", "shards"),
    [({"cfg_parallel_size": 2}, None), ({"ulysses_degree": 2}, [[14, 13]])],
    ids=["cfg2", "ulysses2"],
)
def test_parallel_layout_matches_one_process(
    layout, shards, hunyuan_checkpoint, hunyuan_model
) -> None:
    single = hunyuan_model.generate(PROMPT, **KW, **CFG)
    assert single.info["cfg"] is True
    with Omni(hunyuan_checkpoint, dtype="float32", **layout) as omni:
        assert omni.healthy
        result = omni.generate(PROMPT, **KW, **CFG)
    parallel = result.info["parallel"]
    assert parallel["world_size"] == 2
    assert parallel.get("sequence_shards") == shards
    got, want = result.video.astype(np.int16), single.video.astype(np.int16)
    assert got.shape == want.shape and want.std() > 5
    assert np.abs(got - want).max() <= 1


def test_a_step_cache_with_ulysses_is_refused_before_any_worker_starts(
    hunyuan_checkpoint,
) -> None:
    with pytest.raises(ConfigError, match="cannot be combined with ulysses"):
        Omni(hunyuan_checkpoint, ulysses_degree=2, dtype="float32", cache="first-block")
