"""LTX-2 on two gloo worker processes, against one process.

- ``cfg_parallel_size=2`` splits every forward's rows (the conditional and unconditional rows of
  a step on one rank each; the video and the audio predictions both gathered).
- ``ulysses_degree=2`` cuts the video tokens through the blocks (half of them per rank) while
  the audio tokens stay whole on every rank: the video self-attention is sharded, the
  video-to-audio attention gathers the video keys, the rest runs locally. Text to video, and
  image to video (its per-token timestep: the first latent frame is kept clean, so the
  modulations are sliced like the tokens).

Every pixel within 1/255, the audio within 1e-4. A step cache with Ulysses is refused before
any worker starts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omni_core import ConfigError, Omni

KW = {"height": 32, "width": 64, "num_frames": 5, "num_inference_steps": 2}
WIDE = {"height": 32, "width": 64, "num_frames": 9, "num_inference_steps": 2}


def _same(result: Any, single: Any) -> None:
    assert result.video.shape == single.video.shape and single.video.std() > 5
    diff = np.abs(result.video.astype(np.int16) - single.video.astype(np.int16))
    assert diff.max() <= 1
    assert result.audio.shape == single.audio.shape
    assert np.abs(result.audio - single.audio).max() <= 1e-4


def test_cfg_parallel_matches_one_process(ltx_checkpoint, ltx_model) -> None:
    single = ltx_model.generate("a red cat", seed=9, negative_prompt="blurry", **KW)
    with Omni(ltx_checkpoint, cfg_parallel_size=2, dtype="float32") as omni:
        assert omni.healthy
        result = omni.generate("a red cat", seed=9, negative_prompt="blurry", **KW)
        assert result.info["parallel"]["world_size"] == 2
    _same(result, single)


def _image() -> Any:
    from PIL import Image

    pixels = np.random.RandomState(3).rand(32, 64, 3) * 255
    return Image.fromarray(pixels.astype("uint8"))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["t2v", "i2v"])
def test_ulysses_matches_one_process(kind, request) -> None:
    checkpoint = request.getfixturevalue(
        "ltx_checkpoint" if kind == "t2v" else "ltx_i2v_checkpoint"
    )
    model = request.getfixturevalue("ltx_model" if kind == "t2v" else "ltx_i2v_model")
    ask = {"seed": 9, "negative_prompt": "blurry", **WIDE}
    if kind == "i2v":
        ask["images"] = [_image()]
    single = model.generate("a red cat", **ask)
    with Omni(checkpoint, ulysses_degree=2, dtype="float32") as omni:
        assert omni.healthy
        result = omni.generate("a red cat", **ask)
    parallel = result.info["parallel"]
    assert parallel["world_size"] == 2
    ((first, second),) = parallel["sequence_shards"]
    assert abs(first - second) <= 1 and first + second > 100
    _same(result, single)


def test_a_step_cache_with_ulysses_is_refused_before_any_worker_starts(ltx_checkpoint) -> None:
    with pytest.raises(ConfigError, match="cannot be combined with ulysses"):
        Omni(ltx_checkpoint, ulysses_degree=2, dtype="float32", cache="first-block")
