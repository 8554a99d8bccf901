"""Server VAD (omni_core.serving.realtime.vad) on the real Silero model: where speech starts
and stops, and what ``threshold`` and ``silence_duration_ms`` change."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from .voiced import RATE, silence, voiced


@pytest.fixture(scope="module")
def model() -> Any:
    from omni_core.serving.realtime.vad import load_model

    return load_model()


def _turns(model: Any, samples: np.ndarray, **settings: Any) -> list[tuple[str, int]]:
    from omni_core.serving.realtime.vad import ServerVAD

    vad = ServerVAD(
        {"threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500, **settings},
        model,
    )
    vad.reset(0)
    turns = []
    for at in range(0, len(samples), 2400):  # 100 ms pieces, as a client sends them
        turns += [(t.kind, t.sample) for t in vad.feed(samples[at : at + 2400])]
    return turns


def test_speech_then_silence_starts_and_stops_once(model: Any) -> None:
    audio = np.concatenate([silence(0.5), voiced(1.0), silence(1.0)])
    turns = _turns(model, audio)
    assert [kind for kind, _ in turns] == ["start", "stop"]
    start, stop = turns[0][1], turns[1][1]
    assert abs(start - 0.5 * RATE) < 0.1 * RATE  # within 100 ms of the voice's start
    assert abs(stop - 1.5 * RATE) < 0.15 * RATE


def test_silence_and_steady_noise_are_not_speech(model: Any) -> None:
    noise = (0.05 * np.random.default_rng(0).standard_normal(2 * RATE)).astype(np.float32)
    assert _turns(model, np.concatenate([silence(1.0), noise, silence(0.5)])) == []


def test_threshold_and_silence_duration_are_applied(model: Any) -> None:
    gap = np.concatenate([voiced(0.8), silence(0.3), voiced(0.8, seed=1), silence(1.0)])
    assert [k for k, _ in _turns(model, gap)] == ["start", "stop"]  # 300 ms < 500 ms: one turn
    split = _turns(model, gap, silence_duration_ms=150)
    assert [k for k, _ in split] == ["start", "stop", "start", "stop"]
    # the voice's first windows score 0.6-0.8: a higher threshold starts the turn later
    strict = _turns(model, gap, threshold=0.9)
    assert strict[0][0] == "start" and strict[0][1] > _turns(model, gap)[0][1]
