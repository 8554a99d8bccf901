"""BatchSplitParallel on two gloo ranks: each rank runs half of a batch's rows and every
per-row output comes back whole (a model returning one tensor, or several, as LTX-2's video
and audio predictions), equal to the model run on the whole batch in one process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

from omni_core.testing import free_port

#: What each rank runs (a fresh interpreter: spawned processes cannot import this test module).
_RANK = """
import sys, torch, torch.distributed as dist
from omni_core.diffusion.distributed.parallelize import BatchSplitParallel

class TwoStreams(torch.nn.Module):
    # Two per-row outputs of other shapes, and one shared output.
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.video = torch.nn.Linear(4, 3)
        self.audio = torch.nn.Linear(2, 5)

    def forward(self, hidden_states, audio_hidden_states, scale=1.0):
        return self.video(hidden_states) * scale, self.audio(audio_hidden_states), torch.ones(7)

def inputs():
    generator = torch.Generator().manual_seed(1)
    return torch.randn(4, 6, 4, generator=generator), torch.randn(4, 2, generator=generator)

rank, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
with torch.no_grad():
    if rank < 0:  # the whole batch in one process
        torch.save(TwoStreams()(*inputs(), scale=2.0), out)
        sys.exit(0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    video, audio = inputs()
    got = BatchSplitParallel(TwoStreams(), dist.group.WORLD)(
        hidden_states=video, audio_hidden_states=audio, scale=2.0
    )
    torch.save(got, f"{out}.{rank}")
    dist.destroy_process_group()
"""


def _run(*args: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _RANK, *map(str, args)])


def test_every_per_row_output_is_gathered(tmp_path: Path) -> None:
    out, port = str(tmp_path / "out"), free_port()
    ranks = [_run(rank, port, out) for rank in (0, 1)]
    assert all(p.wait(timeout=120) == 0 for p in ranks)
    assert _run(-1, port, f"{out}.whole").wait(timeout=120) == 0
    want = torch.load(f"{out}.whole")
    for rank in (0, 1):
        got = torch.load(f"{out}.{rank}")
        assert isinstance(got, tuple) and len(got) == 3
        assert got[0].shape == (4, 6, 3) and got[1].shape == (4, 5)
        for ours, theirs in zip(got, want, strict=True):
            assert torch.allclose(ours, theirs, atol=1e-6), (rank, ours, theirs)
