"""``SequencePlan.text_last`` from a third-party-style plugin on two gloo CPU processes: a toy
denoiser whose joint attention puts the text after the image tokens, with a square padding
mask of its local view, registered only through ``omni_register_denoisers``, equals one
process under ``ulysses_degree=2`` (uneven shards, one row with padded text)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from omni_core.contract.config import ParallelConfig
from omni_core.diffusion.distributed import ParallelLauncher

PLUGIN_DIR = Path(__file__).parent / "plugins_text_last"


@pytest.mark.slow
def test_text_last_plan_of_a_plugin_matches_one_process(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))  # spawned workers inherit sys.path
    monkeypatch.delitem(sys.modules, "text_last_plugin", raising=False)
    from text_last_plugin import TextLastProgram

    launcher = ParallelLauncher(TextLastProgram(), ParallelConfig(ulysses_degree=2), device_count=2)
    with launcher:
        assert launcher.healthy
        result = launcher.run({"tokens": 7}, timeout_s=300)
    assert result["shards"] == [4, 3]
    assert result["error"] < 1e-5
