"""The tiny Stable Audio checkpoint through a real ``omni serve`` app on 127.0.0.1:
``POST /v1/audio/generate`` (raw HTTP with httpx, and the openai client's ``post``) answers the
audio ``Omni`` makes for the same request, in every format, under vLLM-Omni's and diffusers'
field names, and bad requests get OpenAI-style 400s that name the field."""

from __future__ import annotations

import io
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

BODY: dict[str, Any] = {"model": "stable-audio-open", "num_inference_steps": 3, "seed": 5}


@pytest.fixture(scope="module")
def server(audio_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """uvicorn serving omni's app (what ``omni serve`` runs) on a thread, warm-up included."""
    from omni_core.testing import serve_on_thread

    with serve_on_thread(
        models=[{"id": "stable-audio-open", "path": str(audio_checkpoint)}],
        state_dir=tmp_path_factory.mktemp("stable-audio-serve-state"),
        warmup=True,
    ) as url:
        yield url


def _post(server: str, body: dict[str, Any]) -> Any:
    return httpx.post(f"{server}/v1/audio/generate", json=body, timeout=300)


def _wav(data: bytes) -> tuple[np.ndarray, int]:
    with wave.open(io.BytesIO(data), "rb") as handle:
        channels, rate = handle.getnchannels(), handle.getframerate()
        raw = handle.readframes(handle.getnframes())
    return np.frombuffer(raw, dtype="<i2").reshape(-1, channels).astype(int), rate


def _int16(audio: np.ndarray) -> np.ndarray:
    return np.round(np.clip(audio, -1.0, 1.0) * 32767.0).astype(int)


@pytest.mark.parametrize(
    ("fields", "kwargs"),
    [
        ({"input": "a dog barking", "audio_length": 0.2}, {"duration_s": 0.2}),
        (  # diffusers' names, CFG with a negative prompt, a start offset
            {
                "prompt": "thunder",
                "negative_prompt": "noise",
                "guidance_scale": 4.0,
                "audio_start_in_s": 0.05,
                "audio_end_in_s": 0.2,
            },
            {
                "negative_prompt": "noise",
                "guidance_scale": 4.0,
                "audio_start_s": 0.05,
                "duration_s": 0.15,
            },
        ),
    ],
    ids=["vllm-omni", "diffusers-names"],
)
def test_wav_is_the_audio_omni_generates(server, audio_model, fields, kwargs) -> None:
    answer = _post(server, {**BODY, **fields})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "audio/wav"
    got, rate = _wav(answer.content)
    prompt = fields.get("input") or fields["prompt"]
    expected = audio_model.generate(prompt, seed=5, num_inference_steps=3, **kwargs)
    want = _int16(expected.audio)
    assert rate == 16000 == int(answer.headers["x-sample-rate"])
    assert got.shape == want.shape and got.shape[1] == 2 == int(answer.headers["x-audio-channels"])
    assert want.std() > 1000 and np.abs(got - want).max() <= 1


def test_flac_pcm_and_mp3(server, audio_model) -> None:
    import av

    body = {**BODY, "input": "a hammer", "audio_length": 0.1}
    expected = _int16(
        audio_model.generate("a hammer", seed=5, num_inference_steps=3, duration_s=0.1).audio
    )
    pcm = _post(server, {**body, "response_format": "pcm"})
    assert pcm.headers["content-type"] == "audio/pcm"
    got = np.frombuffer(pcm.content, dtype="<i2").reshape(-1, 2).astype(int)
    assert np.abs(got - expected).max() <= 1
    flac = _post(server, {**body, "response_format": "flac"})
    assert flac.headers["content-type"] == "audio/flac"
    with av.open(io.BytesIO(flac.content)) as container:
        stream = container.streams.audio[0]
        assert (stream.channels, stream.rate) == (2, 16000)
        frames = [f.to_ndarray().reshape(-1, 2) for f in container.decode(audio=0)]
    assert np.abs(np.concatenate(frames).astype(int) - expected).max() <= 1  # lossless
    mp3 = _post(server, {**body, "response_format": "mp3"})
    assert mp3.status_code == 200 and mp3.headers["content-type"] == "audio/mpeg"
    with av.open(io.BytesIO(mp3.content)) as container:
        assert container.streams.audio[0].channels == 2


def test_the_openai_clients_post(server, audio_model) -> None:
    """The openai SDK has no audio.generate: its generic ``post`` reaches the route."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=300)
    body = {**BODY, "input": "rain on a tin roof", "audio_length": 0.1}
    answer = client.post("/audio/generate", body=body, cast_to=httpx.Response)
    got, _ = _wav(answer.content)
    want = _int16(
        audio_model.generate(
            "rain on a tin roof", seed=5, num_inference_steps=3, duration_s=0.1
        ).audio
    )
    assert np.abs(got - want).max() <= 1
    with pytest.raises(openai.BadRequestError) as info:
        client.post("/audio/generate", body={**body, "audio_length": 9.0}, cast_to=httpx.Response)
    assert info.value.body["param"] == "audio_length"  # type: ignore[index]


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"audio_length": 5.0}, "audio_length", "at most 0.256 s"),
        ({"audio_length": 900.0}, "audio_length", "less than or equal to 600"),
        ({"audio_start": 0.3}, "audio_start", "clips end at"),
        ({"audio_end_in_s": 0.1, "audio_start": 0.2}, "audio_end_in_s", "not after"),
        ({"response_format": "opus"}, "response_format", "unsupported format"),
        ({"stream_format": "sse"}, "stream_format", "not supported"),
        ({"speed": 2.0}, "speed", "not sped up"),
        ({"input": "   "}, "input", "empty"),
        ({"prompt": "x"}, "prompt", "not both"),
        ({"eta": 0.3}, "eta", "Extra inputs"),
        ({"num_inference_steps": 0}, "num_inference_steps", "greater than or equal to 1"),
    ],
)
def test_bad_requests_are_openai_style_400s(server, fields, param, words) -> None:
    answer = _post(server, {**BODY, "input": "x", **fields})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and words in error["message"], error


def test_models_lists_the_audio_modality(server) -> None:
    models = httpx.get(f"{server}/v1/models", timeout=30).json()["data"]
    (model,) = models
    assert model["modality"] == "audio" and model["tasks"] == ["t2a"]
    assert model["pipeline"] == "stable-audio"
