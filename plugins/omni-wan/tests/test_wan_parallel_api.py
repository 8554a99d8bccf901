"""Omni(..., cfg_parallel_size=2): the API launches the worker group and matches one process."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


@pytest.mark.slow
def test_wan_omni_cfg_parallel_matches_single_process(
    tiny_wan: Any, omni_wan_model: Any, wan_kwargs: Any
) -> None:
    from omni_core import Omni

    kwargs = wan_kwargs("t2v", num_inference_steps=3, seed=9)
    single = omni_wan_model("t2v").generate(**kwargs)
    with Omni(tiny_wan("t2v"), cfg_parallel_size=2, dtype="float32") as omni:
        assert omni.healthy
        result = omni.generate(**kwargs)
        assert result.info["parallel"]["world_size"] == 2
        assert result.info["cfg_batch"] is True  # the two ranks split the batched CFG rows
    assert not omni.healthy  # the with block stopped the workers
    diff = np.abs(result.video.astype(np.int16) - single.video.astype(np.int16))
    assert diff.max() <= 1


def test_wan_omni_parallel_refuses_device(tiny_wan: Any) -> None:
    from omni_core import ConfigError, Omni

    with pytest.raises(ConfigError, match="cannot be combined"):
        Omni(tiny_wan("t2v"), cfg_parallel_size=2, device="cpu")
