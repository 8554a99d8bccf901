"""Pocket TTS served by one real ``omni serve`` (127.0.0.1) to the official ``openai`` client.

Speech whole, streamed and as SSE deltas in the checkpoint's built-in voice (``alba``) and in a
voice uploaded through ``POST /v1/audio/voices`` (cloned from its audio alone), greedy and
seeded; the WebSocket text stream; ``omni generate speech`` with a voice prompt. Each answer
equals transformers' ``generate()`` on the same inputs, to 16-bit PCM. Bad input is a 400 with
an OpenAI-style error body.
"""

from __future__ import annotations

import base64
import io
import json
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from omni_core.testing.services import omni_serve, speak_over_websocket

from omni_pocket_tts.layout import builtin_voices, load_voice
from omni_pocket_tts.testing import reference_generate

#: The uploaded voice: 0.5 s of 16-bit noise at 24 kHz (the shortest upload the server takes;
#: what it decodes is exactly these values).
VOICE = (np.round(np.random.default_rng(1).standard_normal(12000) * 3277) / 32768).astype(
    np.float32
)
LSB = 2 / 32767
TEXT = "Hello there, how are you?"
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def url(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One ``omni serve`` of the session's checkpoint for the module."""
    root = tmp_path_factory.mktemp("pocket-serve")
    args = [f"pocket-tts={checkpoint}", "--device", "cpu", "--state-dir", str(root / "state")]
    with omni_serve(*args, "--log-level", "warning", "--no-warmup", log=root / "serve.log") as base:
        yield base


@pytest.fixture(scope="module")
def client(url: str) -> Any:
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def alba(checkpoint: Path) -> Any:
    return load_voice(builtin_voices(checkpoint)["alba"])


def _wav(audio: np.ndarray, rate: int = 24000) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((audio * 32768).astype("<i2").tobytes())
    return buffer.getvalue()


def _upload(url: str, name: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/audio/voices",
        data={"name": name, "consent": "true"},
        files={"audio": (f"{name}.wav", _wav(VOICE), "audio/wav")},
        timeout=60,
    )


def _pcm(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, "<i2") / 32767


def _whole_and_streamed(client: Any, **body: Any) -> list[np.ndarray]:
    """The answer whole and streamed: the streamed chunks are decoded after the codec's context
    (float rounding apart, the same samples: they may round to the next 16-bit step)."""
    whole = client.audio.speech.create(**body, response_format="pcm").content
    with client.audio.speech.with_streaming_response.create(
        **body, response_format="pcm", stream_format="audio"
    ) as response:
        streamed = b"".join(response.iter_bytes())
    assert len(streamed) == len(whole) and whole
    return [_pcm(whole), _pcm(streamed)]


def _heard_as(expected: Any, *heard: np.ndarray) -> None:
    for samples in heard:
        np.testing.assert_allclose(samples, np.clip(expected.numpy(), -1, 1), atol=LSB)


def test_the_built_in_voice_whole_and_streamed(
    client: Any, checkpoint: Path, url: str, alba: Any
) -> None:
    voices = httpx.get(f"{url}/v1/audio/voices", timeout=10).json()["voices"]
    assert voices == ["alba"]
    _, expected = reference_generate(checkpoint, TEXT, voice=alba)
    heard = _whole_and_streamed(
        client, model="pocket-tts", voice="alba", input=TEXT, extra_body=GREEDY
    )
    _heard_as(expected, *heard)
    # sampled: the request's noise is generate()'s after torch.manual_seed(seed)
    _, expected = reference_generate(checkpoint, TEXT, voice=alba, seed=3, num_flow_steps=2)
    body = {"seed": 3, "num_flow_steps": 2}
    heard = _whole_and_streamed(
        client, model="pocket-tts", voice="alba", input=TEXT, extra_body=body
    )
    _heard_as(expected, *heard)


def test_an_uploaded_voice_is_cloned(client: Any, checkpoint: Path, url: str) -> None:
    response = _upload(url, "carol")  # no transcript: Pocket TTS clones from audio alone
    assert response.status_code == 201, response.text
    _, expected = reference_generate(checkpoint, TEXT, audio=VOICE)
    heard = _whole_and_streamed(
        client, model="pocket-tts", voice="carol", input=TEXT, extra_body=GREEDY
    )
    _heard_as(expected, *heard)


def test_sse_deltas_arrive_as_chunks_and_make_the_whole_clip(client: Any, url: str) -> None:
    """``stream_format: sse``: the first delta is the first 2 frames (``first_chunk_frames``),
    the rest follow; together they are the whole answer's PCM (to its last bit)."""
    whole = client.audio.speech.create(
        model="pocket-tts", voice="alba", input=TEXT, response_format="pcm", extra_body=GREEDY
    ).content
    body = {"model": "pocket-tts", "voice": "alba", "input": TEXT, **GREEDY}
    sse = {**body, "response_format": "pcm", "stream_format": "sse"}
    deltas, done = [], None
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=sse, timeout=60) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[len("data: ") :])
                if event["type"] == "speech.audio.delta":
                    deltas.append(base64.b64decode(event["audio"]))
                else:
                    done = event
    assert done is not None and done["type"] == "speech.audio.done", done
    assert len(deltas) >= 3 and len(deltas[0]) == 2 * 2 * 1920  # 2 frames of 1920, 16-bit
    joined = b"".join(deltas)
    assert len(joined) == len(whole)
    np.testing.assert_allclose(_pcm(joined), _pcm(whole), atol=LSB)


def test_the_websocket_text_stream_speaks(checkpoint: Path, url: str, alba: Any) -> None:
    session = {"model": "pocket-tts", "voice": "alba", "response_format": "pcm", **GREEDY}
    spoken = speak_over_websocket(url, session, ["Hello ", "there."])
    events = [e["type"] for e in spoken.events]
    assert events == ["audio.start", "audio.done", "session.done"], spoken.events
    _, expected = reference_generate(checkpoint, "Hello there.", voice=alba)
    _heard_as(expected, _pcm(spoken.audio))


def test_bad_input_is_a_400_with_an_openai_error(client: Any) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as error:
        client.audio.speech.create(model="pocket-tts", voice="nobody", input="Hi.")
    body = error.value.body
    assert isinstance(body, dict) and body["param"] == "voice" and body["message"], body
    bad: list[dict[str, Any]] = [
        {"num_flow_steps": 0},
        {"eos_threshold": "high"},
        {"max_new_tokens": 5000},
        {"top_p": 0.5},
    ]
    for extra in bad:
        with pytest.raises(openai.BadRequestError) as error:
            client.audio.speech.create(
                model="pocket-tts", voice="alba", input="Hi.", extra_body=extra
            )
        body = error.value.body
        assert isinstance(body, dict) and next(iter(extra)) in str(body), body


def test_omni_generate_speech_clones_as_the_server_does(
    client: Any, url: str, checkpoint: Path, tmp_path: Path
) -> None:
    """``--ref-audio FILE`` is the body's voice prompt: the CLI's WAV holds the samples the
    server's holds for an uploaded voice of the same audio, seeded (sampled)."""
    from omni_core.testing import run_cli

    assert _upload(url, "dave").status_code == 201
    voice_file = tmp_path / "dave.wav"
    voice_file.write_bytes(_wav(VOICE))
    target = tmp_path / "cloned.wav"
    args = ["generate", "speech", TEXT, "--model", str(checkpoint), "--device", "cpu"]
    args += ["--ref-audio", str(voice_file), "--seed", "3"]
    result = run_cli(*args, "-o", str(target), "-q")
    assert result.exit_code == 0, result.output
    served = client.audio.speech.create(
        model="pocket-tts", voice="dave", input=TEXT, response_format="wav", extra_body={"seed": 3}
    ).content

    def samples(raw: bytes) -> np.ndarray:
        with wave.open(io.BytesIO(raw)) as handle:
            assert handle.getframerate() == 24000
            return np.frombuffer(handle.readframes(handle.getnframes()), "<i2")

    mine = samples(target.read_bytes())
    assert mine.size > 0
    np.testing.assert_array_equal(mine, samples(served))
