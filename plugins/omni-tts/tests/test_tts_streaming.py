"""Streaming = the whole result, chunks arrive early, concurrent requests don't mix, bad input."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from omni_core import InvalidRequestError
from omni_core.speech import StreamingSpeechPipeline

FAMILIES = ["vits", "speecht5", "fastspeech2", "csm"]
TEXT = "one sentence first. then a second. and the third!"


def _kw(family: str) -> dict:
    """Keep the autoregressive tiny models short (random weights never choose to stop)."""
    return {"csm": {"max_new_tokens": 14}, "speecht5": {"maxlenratio": 1.0}}.get(family, {})


@pytest.mark.parametrize("family", FAMILIES)
def test_tts_stream_equals_generate(omni_tts, family) -> None:
    omni = omni_tts(family)
    chunks = list(omni.stream(TEXT, seed=4, **_kw(family)))
    assert len(chunks) >= 2, "multi-sentence text must arrive in several chunks"
    whole = omni.generate(TEXT, seed=4, **_kw(family))
    np.testing.assert_array_equal(np.concatenate([c.samples for c in chunks]), whole.audio)
    assert all(c.sample_rate == whole.sample_rate for c in chunks)
    assert whole.audio.dtype == np.float32 and np.isfinite(whole.audio).all()


@pytest.mark.parametrize("family", ["vits", "csm"])
def test_tts_stream_resamples_and_speeds(omni_tts, family) -> None:
    omni = omni_tts(family)
    base = omni.generate(TEXT, seed=2, **_kw(family))
    out = omni.generate(TEXT, seed=2, sample_rate=48000, speed=1.5, **_kw(family))
    assert out.sample_rate == 48000
    ratio = (len(out.audio) / 48000) / (len(base.audio) / base.sample_rate)
    # VITS scales durations natively (random tiny durations round per token), CSM is
    # time-stretched by atempo: both about 1/1.5 as long.
    assert 0.45 < ratio < 0.9
    streamed = np.concatenate(
        [c.samples for c in omni.stream(TEXT, seed=2, sample_rate=48000, speed=1.5, **_kw(family))]
    )
    np.testing.assert_array_equal(streamed, out.audio)


def test_tts_csm_first_chunk_before_generation_ends(omni_tts) -> None:
    omni = omni_tts("csm")
    started = time.perf_counter()
    stream = omni.stream("a longer utterance to generate", seed=1, max_new_tokens=30)
    first = next(stream)
    first_s = time.perf_counter() - started
    rest = list(stream)
    total_s = time.perf_counter() - started
    assert len(first.samples) == 2 * len(rest[0].samples) // 6 and rest
    assert first_s < total_s / 2


def test_tts_csm_abandoned_stream_stops_generation(omni_tts) -> None:
    omni = omni_tts("csm")
    stream = omni.stream("stop me early please", seed=1, max_new_tokens=200)
    next(stream)
    started = time.perf_counter()
    stream.close()  # joins the producer: it must stop at the next frame, not after 200
    assert time.perf_counter() - started < 5
    # The pipeline is free again and still reproduces itself.
    a = omni.generate("after a cancel", seed=9, max_new_tokens=8).audio
    b = omni.generate("after a cancel", seed=9, max_new_tokens=8).audio
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("family", ["vits", "speecht5", "csm"])
def test_tts_concurrent_requests_do_not_mix(omni_tts, family) -> None:
    omni = omni_tts(family)
    voices = [v.id for v in omni.pipeline.voices()]
    jobs = [
        dict(
            prompt=f"request number {i}. it says {i}!",
            seed=100 + i,
            voice=voices[i % len(voices)],
            sample_rate=(None, 24000)[i % 2],
            **_kw(family),
        )
        for i in range(4)
    ]
    expected = [omni.generate(j.pop("prompt"), **j).audio for j in [dict(j) for j in jobs]]
    barrier = threading.Barrier(len(jobs))

    def run(job: dict) -> np.ndarray:
        job = dict(job)
        barrier.wait()
        return np.concatenate([c.samples for c in omni.stream(job.pop("prompt"), **job)])

    with ThreadPoolExecutor(len(jobs)) as pool:
        got = list(pool.map(run, jobs))
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_array_equal(e, g)


@pytest.mark.parametrize(
    "kwargs,param",
    [
        ({"prompt": ""}, "input"),
        ({"prompt": "  \n "}, "input"),
        ({"prompt": "x" * (StreamingSpeechPipeline.max_text_chars + 1)}, "input"),
        ({"prompt": "hi", "voice": "nobody"}, "voice"),
        ({"prompt": "hi", "sample_rate": 12345}, "sample_rate"),
        ({"prompt": "hi", "speed": 10.0}, "speed"),
        ({"prompt": "hi", "not_an_option": 1}, "not_an_option"),
    ],
)
@pytest.mark.parametrize("family", ["vits", "csm"])
def test_tts_bad_requests_fail_before_compute(omni_tts, family, kwargs, param, monkeypatch) -> None:
    omni = omni_tts(family)

    def never(*args, **kw):  # pragma: no cover - reaching it is the failure
        raise AssertionError("computed despite a bad request")

    monkeypatch.setattr(type(omni.pipeline), "synthesize", never)
    kwargs = dict(kwargs)
    with pytest.raises(InvalidRequestError) as err:
        omni.generate(kwargs.pop("prompt"), **kwargs)
    assert err.value.param == param
    with pytest.raises(InvalidRequestError):
        omni.stream("", voice=None)
