"""Steps that make no audio (``StepOutput.is_audio`` False) are dropped when chunks are handed out.

A model whose steps also make control tokens (VibeVoice's speech start and speech end) marks
those rows; the runtime keeps them out of the codec, in streamed and whole chunks alike, while
the stop flag still ends the request at its frame.
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

#: Frame ``i`` of a request is audio unless ``i % 3 == 1``; the request stops at frame 10.
STOP = 10


class Counter(DecoderStage):
    """Frame ``i``'s one code is ``i`` (per row); every third frame is a control token."""

    def _out(self, frames: torch.Tensor) -> StepOutput:
        return StepOutput(
            tokens=frames.float()[:, None], stop=frames == STOP, is_audio=frames % 3 != 1
        )

    def prefill(self, states: list[ARState], cache) -> StepOutput:
        return self._out(torch.zeros(len(states), dtype=torch.long))

    def decode(self, states: list[ARState], last: StepOutput, cache) -> StepOutput:
        return self._out(torch.tensor([s.frames for s in states]))


class Samples(ChunkDecoder):
    """A frame's code, twice: the audio shows which frames reached the codec."""

    sample_rate, samples_per_frame = 8000, 2

    def decode(self, codes: torch.Tensor, context: int) -> torch.Tensor:
        return codes[:, 0, context:].repeat_interleave(2, dim=-1)


def _audio_of(schedule: ChunkSchedule) -> tuple[np.ndarray, int]:
    stages = SpeechStages(decoder=Counter(), codec=Samples(), schedule=schedule, max_len=64)
    runtime = ARRuntime(stages, max_batch=2)
    state = ARState(
        request=GenerationRequest(prompt="count"), data={"prompt": torch.zeros(2, 1)}, max_frames=40
    )
    chunks = [c.samples for c in runtime.open(state)]
    return np.concatenate(chunks), len(chunks)


@pytest.mark.parametrize("schedule", [ChunkSchedule(first=2, rest=3), ChunkSchedule.whole()])
def test_control_frames_make_no_audio_and_the_stop_still_ends(schedule: ChunkSchedule) -> None:
    audio, chunks = _audio_of(schedule)
    spoken = [i for i in range(STOP) if i % 3 != 1]  # frames 0..9 less the control ones
    np.testing.assert_array_equal(audio, np.repeat(np.array(spoken, np.float32), 2))
    assert chunks > 1 if schedule.first == 2 else chunks == 1
