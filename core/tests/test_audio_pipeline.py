"""StreamingSpeechPipeline: checks before compute, stream = whole, per-request state, threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict

from omni_core.contract.errors import InvalidRequestError
from omni_core.contract.types import GenerationRequest, Voice
from omni_core.speech import pipeline as audio


class ToneExtras(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hz_step: float = 50.0


class TonePipeline(audio.StreamingSpeechPipeline):
    """Speaks each word as a tone whose pitch depends on the voice and the word; sleeps between
    words so that concurrent requests really interleave."""

    extras_model = ToneExtras
    sample_rate = 16000
    computed = 0

    @classmethod
    def from_pretrained(cls, path: Path, options) -> TonePipeline:  # pragma: no cover
        return cls()

    def voices(self) -> list[Voice]:
        return [Voice(id="low"), Voice(id="high")]

    def synthesize(self, request: GenerationRequest) -> Iterator[np.ndarray]:
        TonePipeline.computed += 1
        base = 200.0 if request.voice in (None, "low") else 600.0
        for i, word in enumerate(request.prompt.split()):
            hz = base + request.extras["hz_step"] * (len(word) + i)
            t = np.arange(int(0.05 * self.sample_rate)) / self.sample_rate
            time.sleep(0.002)
            yield (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def _request(text: str, **kw) -> GenerationRequest:
    return GenerationRequest(prompt=text, **kw)


def test_audio_pipeline_stream_is_the_whole_result() -> None:
    pipe = TonePipeline()
    req = _request("one two three four", sample_rate=24000, speed=1.25)
    chunks = list(pipe.stream(req))
    assert len(chunks) >= 2 and all(c.sample_rate == 24000 for c in chunks)
    whole = pipe.collect(req)
    assert np.array_equal(np.concatenate([c.samples for c in chunks]), whole.audio)
    assert whole.sample_rate == 24000
    # Speed 1.25 and 16k -> 24k: 4 words x 50 ms / 1.25 at 24 kHz.
    assert abs(len(whole.audio) / 24000 - 0.2 / 1.25) < 0.03
    assert whole.timings["time_to_first_audio_s"] <= whole.timings["generate_s"]


def test_audio_pipeline_native_rate_untouched() -> None:
    pipe = TonePipeline()
    chunks = list(pipe.stream(_request("a bb")))
    assert [len(c.samples) for c in chunks] == [800, 800]


@pytest.mark.parametrize(
    "kwargs,param",
    [
        ({"prompt": ""}, "input"),
        ({"prompt": "   "}, "input"),
        ({"prompt": "x" * (audio.MAX_TEXT_CHARS + 1)}, "input"),
        ({"prompt": "hi", "voice": "alto"}, "voice"),
        ({"prompt": "hi", "sample_rate": 11111}, "sample_rate"),
        ({"prompt": "hi", "extras": {"nope": 1}}, "nope"),
    ],
)
def test_audio_pipeline_rejects_before_compute(kwargs, param) -> None:
    pipe = TonePipeline()
    before = TonePipeline.computed
    with pytest.raises(InvalidRequestError) as err:
        pipe.stream(GenerationRequest(**kwargs))
    assert err.value.param == param
    assert TonePipeline.computed == before


def test_audio_pipeline_precheck_without_weights(tmp_path) -> None:
    with pytest.raises(InvalidRequestError) as err:
        TonePipeline.precheck(tmp_path, _request(""))
    assert err.value.param == "input"
    ok = TonePipeline.precheck(tmp_path, _request("hello"))
    assert ok.extras == {"hz_step": 50.0}


def test_audio_pipeline_threads_do_not_mix() -> None:
    pipe = TonePipeline()
    requests = [
        _request(
            " ".join(["w" * (1 + (i + j) % 5) for j in range(6)]),
            voice="low" if i % 2 else "high",
            sample_rate=(16000, 22050, 24000, 48000)[i % 4],
            speed=(1.0, 1.5, 0.8)[i % 3],
        )
        for i in range(8)
    ]
    expected = [pipe.collect(r).audio for r in requests]
    start = threading.Barrier(len(requests))

    def run(r: GenerationRequest) -> np.ndarray:
        start.wait()
        return np.concatenate([c.samples for c in pipe.stream(r)])

    with ThreadPoolExecutor(len(requests)) as pool:
        got = list(pool.map(run, requests))
    for e, g in zip(expected, got, strict=True):
        assert np.array_equal(e, g)


class LettersOnly(TonePipeline):
    """A voice that says ASCII letters only (a tokenizer that drops everything else)."""

    def speakable(self) -> str | None:
        return "[A-Za-z]"


def test_audio_pipeline_speakable_refuses_a_silent_text_before_compute() -> None:
    """``speakable()`` (a declared member, default None) makes a text of none of the voice's
    characters a 400 naming ``input`` before any compute; other texts are spoken."""
    assert TonePipeline().speakable() is None
    pipe = LettersOnly()
    before = TonePipeline.computed
    with pytest.raises(InvalidRequestError) as info:
        pipe.validate(_request("1234 !?"))
    assert info.value.param == "input" and "[A-Za-z]" in str(info.value)
    assert TonePipeline.computed == before
    assert pipe.collect(_request("12 ab")).audio.size > 0
