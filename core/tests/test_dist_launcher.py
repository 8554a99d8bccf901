"""The launcher: lock-step requests, error transport, dead-worker detection, no stray process."""

from __future__ import annotations

import os

import psutil
import pytest

from omni_core.contract.config import ParallelConfig
from omni_core.contract.errors import InvalidRequestError
from omni_core.diffusion.distributed import DistributedError, ParallelLauncher, WorkerDiedError
from omni_core.diffusion.distributed.checks import EchoProgram


def _children() -> set[int]:
    """Child processes of this one, except multiprocessing's shared resource tracker."""
    me = psutil.Process()
    return {
        c.pid
        for c in me.children(recursive=True)
        if "resource_tracker" not in " ".join(c.cmdline())
    }


def test_launcher_lifecycle_and_dead_worker() -> None:
    before = _children()
    launcher = ParallelLauncher(EchoProgram(), ParallelConfig(cfg_parallel_size=2), device_count=2)
    launcher.start()
    try:
        assert launcher.healthy
        assert len(launcher.pids) == 2
        assert set(launcher.pids) <= _children()

        # Lock-step: both ranks ran the collective (1 + 2), rank 0 answered.
        result = launcher.run("hello", timeout_s=120)
        assert result["payload"] == "hello"
        assert result["rank_sum"] == 3
        assert result["pid"] == launcher.pids[0]

        # Validation errors come back typed (param kept) and leave the group healthy.
        with pytest.raises(InvalidRequestError) as info:
            launcher.run("bad", timeout_s=120)
        assert info.value.param == "payload"
        assert launcher.healthy
        assert launcher.run(["again"], timeout_s=120)["payload"] == ["again"]

        # A worker dies mid-request: the request fails with a clear error, /health turns bad.
        died = r"worker rank 1 \(pid \d+\) died with exit code 7"
        with pytest.raises(WorkerDiedError, match=died):
            launcher.run("die", timeout_s=120)
        assert not launcher.healthy
        assert "rank 1" in (launcher.health_reason or "")
        with pytest.raises(WorkerDiedError, match="unhealthy"):
            launcher.submit("after")
    finally:
        launcher.close()
    # No stray process: the survivor (rank 0, stuck in a collective) was stopped too.
    assert _children() == before
    for pid in launcher.pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(DistributedError, match="closed"):
        launcher.submit("closed")


def test_hung_worker_times_out_and_marks_the_group_unhealthy() -> None:
    before = _children()
    launcher = ParallelLauncher(EchoProgram(), ParallelConfig(ulysses_degree=2), device_count=2)
    with launcher:
        assert launcher.run("warm", timeout_s=120)["rank_sum"] == 3
        # The last rank sleeps instead of joining the collective: rank 0 waits, no answer.
        with pytest.raises(WorkerDiedError, match="no answer within 3 s: a worker is hung"):
            launcher.run("hang", timeout_s=3)
        assert not launcher.healthy
        assert "hung" in (launcher.health_reason or "")
    assert _children() == before
