"""``ChunkSchedule.gather``: due chunks wait for every n-th step, so requests that joined a few
steps apart share codec calls, each keeping its own chunk boundaries; a request at its last
frame waits unstepped; seeded requests share calls only with a codec that ``batches_seeded``
on a runtime allowed ``batch_seeded`` (the server's ``--batch-seeded``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from omni_core import GenerationRequest
from omni_core.speech import (
    ARRuntime,
    ARState,
    ChunkDecoder,
    ChunkSchedule,
    DecoderStage,
    SpeechStages,
    StepOutput,
)

FRAMES = 11


class Frames(DecoderStage):
    """Frame ``i`` of request ``n`` has the one code ``100 * n + i``; it never stops itself."""

    def __init__(self) -> None:
        self.made: dict[int, int] = {}

    def _out(self, states: list[ARState]) -> StepOutput:
        for s in states:
            self.made[s.data["n"]] = self.made.get(s.data["n"], 0) + 1
        codes = torch.tensor([100.0 * s.data["n"] + s.frames for s in states])
        return StepOutput(tokens=codes[:, None], stop=torch.zeros(len(states), dtype=torch.bool))

    def prefill(self, states: list[ARState], cache) -> StepOutput:
        return self._out(states)

    def decode(self, states: list[ARState], last: StepOutput, cache) -> StepOutput:
        return self._out(states)


class Calls(ChunkDecoder):
    """A frame's code as its one sample; records each call's (rows, context, new)."""

    sample_rate, samples_per_frame, left_context = 8000, 1, 1

    def __init__(self, batches_seeded: bool = False) -> None:
        self.batches_seeded = batches_seeded
        self.calls: list[tuple[int, int, int]] = []

    def decode(self, codes: torch.Tensor, context: int) -> torch.Tensor:
        self.calls.append((codes.shape[0], context, codes.shape[-1] - context))
        return codes[:, 0, context:]


def _serve(gather: int, seeded: bool = False, batches_seeded: bool = False, allowed: bool = False):
    decoder, codec = Frames(), Calls(batches_seeded)
    schedule = ChunkSchedule(first=2, rest=4, gather=gather)
    runtime = ARRuntime(
        SpeechStages(decoder=decoder, codec=codec, schedule=schedule, max_len=64), max_batch=4
    )
    runtime.allow_seeded_batches(allowed)
    streams, chunks = [], [[], [], []]
    for step in range(60):
        if step in (0, 1, 3):
            n = len(streams)
            request = GenerationRequest(prompt="count", seed=n if seeded else None)
            state = ARState(
                request=request, data={"prompt": torch.zeros(2, 1), "n": n}, max_frames=FRAMES
            )
            streams.append(runtime.open(state))
        runtime.step()
        for i, s in enumerate(streams):
            chunks[i].extend(c.samples for c in s.poll())
        if len(streams) == 3 and all(s.done for s in streams):
            break
    assert all(s.done and s.error is None for s in streams)
    return chunks, codec.calls, decoder.made


@pytest.mark.parametrize("gather", [1, 4])
def test_gathered_chunks_keep_each_requests_own_boundaries(gather: int) -> None:
    chunks, calls, made = _serve(gather)
    for n, mine in enumerate(chunks):
        assert [len(c) for c in mine] == [2, 4, 4, 1]  # first, rest, rest, the last frame
        np.testing.assert_array_equal(np.concatenate(mine), 100 * n + np.arange(FRAMES))
    assert made == {0: FRAMES, 1: FRAMES, 2: FRAMES}  # nobody stepped past its last frame
    assert sum(rows for rows, _, _ in calls) == 12
    if gather == 1:
        assert len(calls) == 12  # joined at different steps: never due together
    else:
        assert len(calls) < 8 and max(rows for rows, _, _ in calls) == 3


@pytest.mark.parametrize("batches_seeded", [False, True])
@pytest.mark.parametrize("allowed", [False, True])
def test_seeded_requests_share_calls_only_when_codec_and_server_allow(
    batches_seeded: bool, allowed: bool
) -> None:
    chunks, calls, _ = _serve(4, seeded=True, batches_seeded=batches_seeded, allowed=allowed)
    assert [np.concatenate(c).tolist() for c in chunks] == [
        (100 * n + np.arange(FRAMES)).tolist() for n in range(3)
    ]
    widest = max(rows for rows, _, _ in calls)
    assert widest == (3 if batches_seeded and allowed else 1)


def test_gather_must_be_positive() -> None:
    with pytest.raises(ValueError, match="gather"):
        ChunkSchedule(gather=0)
