"""Layout validation: bad parallel layouts are refused with a clear message, before any spawn."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from omni_core.contract.config import ParallelConfig
from omni_core.contract.errors import ConfigError
from omni_core.diffusion.distributed import ParallelLayout, checkpoint_num_heads, validate_layout


def test_world_size_and_groups_are_cfg_major() -> None:
    layout = validate_layout(ParallelConfig(cfg_parallel_size=2, ulysses_degree=2), device_count=4)
    assert layout == ParallelLayout(2, 2)
    assert layout.world_size == 4
    assert layout.ulysses_group_ranks() == [[0, 1], [2, 3]]
    assert layout.cfg_group_ranks() == [[0, 2], [1, 3]]
    assert [layout.cfg_rank(r) for r in range(4)] == [0, 0, 1, 1]
    assert [layout.ulysses_rank(r) for r in range(4)] == [0, 1, 0, 1]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"cfg_parallel_size": 2, "ulysses_degree": 2, "device_count": 2},
            "2 x 2 = 4 ranks, but only 2 device(s) are available",
        ),
        ({"ulysses_degree": 4, "num_heads": 6, "device_count": 8}, "does not divide the model's 6"),
        ({"cfg_parallel_size": 3}, "must be 1 or 2, got 3"),
        ({"cfg_parallel_size": 0}, "cfg_parallel_size: must be >= 1"),
        ({"ulysses_degree": 0}, "ulysses_degree: must be >= 1"),
        ({"ulysses_degree": "2"}, "ulysses_degree: must be an integer"),
        (
            {"cfg_parallel_size": 2, "supports_cfg_parallel": False, "model_name": "TinyPipe"},
            "TinyPipe does not support CFG-parallel",
        ),
        (
            {"ulysses_degree": 2, "supports_sequence_parallel": False},
            "does not support sequence parallelism",
        ),
    ],
)
def test_invalid_layouts_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_layout(**kwargs)
    assert message in str(info.value)


def test_heads_error_lists_valid_degrees() -> None:
    with pytest.raises(ConfigError, match=r"use one of \[1, 2, 3, 6\]"):
        validate_layout(ulysses_degree=4, num_heads=6)


def test_valid_layouts_pass() -> None:
    assert validate_layout(ulysses_degree=2, num_heads=12, device_count=2).world_size == 2
    assert validate_layout(ParallelConfig()).world_size == 1


def test_launcher_refuses_before_spawning(tmp_path) -> None:
    from omni_core.diffusion.distributed import ParallelLauncher
    from omni_core.diffusion.distributed.checks import EchoProgram

    before = set(multiprocessing.active_children())
    with pytest.raises(ConfigError, match="only 1 device"):
        ParallelLauncher(EchoProgram(), ParallelConfig(cfg_parallel_size=2), device_count=1)
    with pytest.raises(ConfigError, match="does not divide the model's 5"):
        ParallelLauncher(EchoProgram(), ParallelConfig(ulysses_degree=2), num_heads=5)
    assert set(multiprocessing.active_children()) == before


def test_checkpoint_num_heads(tmp_path) -> None:
    (tmp_path / "transformer").mkdir()
    (tmp_path / "transformer" / "config.json").write_text(json.dumps({"num_attention_heads": 12}))
    assert checkpoint_num_heads(tmp_path) == 12
    assert checkpoint_num_heads(tmp_path / "missing") is None


def test_ulysses_needs_a_registered_sequence_plan() -> None:
    """A denoiser class no plugin describes is refused by name, before any collective."""
    import torch

    from omni_core.contract.host import PluginHost
    from omni_core.diffusion.distributed import DistributedError
    from omni_core.diffusion.distributed.groups import ParallelState
    from omni_core.diffusion.distributed.parallelize import parallelize_denoiser

    class UnknownTransformer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4)])

    state = ParallelState(
        layout=ParallelLayout(1, 2), rank=0, device=torch.device("cpu"), backend="gloo"
    )
    builtins_only = PluginHost(autoload=False).registry
    with pytest.raises(DistributedError) as info:
        parallelize_denoiser(UnknownTransformer(), state=state, registry=builtins_only)
    message = str(info.value)
    assert "UnknownTransformer" in message
    assert "DenoiserSpec" in message and "sequence_plan" in message
