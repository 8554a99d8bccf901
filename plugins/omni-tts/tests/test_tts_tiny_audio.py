"""The tiny vocoder checkpoints speak like a model, not a click (issue 34, point 5): the demo's
``omni generate speech "Hello from omni."`` on the tiny VITS made 0.07 s of clipped noise, which
a newcomer takes for a broken pipeline. Random weights still say nothing, but for about a
second and without saturating the output."""

from __future__ import annotations

import numpy as np
import pytest

#: The demo's sentence.
TEXT = "Hello from omni."


@pytest.mark.parametrize("family", ["vits", "fastspeech2"])
def test_tiny_checkpoint_speaks_about_a_second_unclipped(omni_tts, family: str) -> None:
    result = omni_tts(family).generate(TEXT, seed=0)
    seconds = len(result.audio) / result.sample_rate
    assert 0.5 <= seconds <= 3.0, f"{family}: {seconds:.3f} s"
    clipped = float(np.mean(np.abs(result.audio) >= 0.99))
    assert clipped < 0.01, f"{family}: {clipped:.1%} of the samples at full scale"
