"""Dia served by one real ``omni serve`` (127.0.0.1) to the official ``openai`` client.

Speech whole and streamed in Dia's own voice (``default``: Dia has no built-in speakers, this is
the model without a voice prompt) and in a voice uploaded through ``POST /v1/audio/voices``
(cloned from its audio and transcript); each answer equals transformers' ``generate()`` on the
same inputs, to 16-bit PCM. Bad input is a 400 with an OpenAI-style error body.
"""

from __future__ import annotations

import io
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from omni_core.testing.services import omni_serve

from omni_dia.testing import reference_generate

#: The uploaded voice: 0.5 s of 16-bit noise at 44.1 kHz (the shortest upload the server takes;
#: what it decodes is exactly these values) and its transcript.
VOICE = (np.round(np.random.default_rng(1).standard_normal(22050) * 3277) / 32768).astype(
    np.float32
)
TRANSCRIPT = "[S1] Some words."
LSB = 2 / 32767
TEXT = "[S1] Hello there. [S2] Hi!"


@pytest.fixture(scope="module")
def url(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One ``omni serve`` of the session's checkpoint for the module."""
    root = tmp_path_factory.mktemp("dia-serve")
    args = [f"dia={checkpoint}", "--device", "cpu", "--state-dir", str(root / "state")]
    with omni_serve(*args, "--log-level", "warning", "--no-warmup", log=root / "serve.log") as base:
        yield base


@pytest.fixture(scope="module")
def client(url: str) -> Any:
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def _wav(audio: np.ndarray, rate: int = 44100) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((audio * 32768).astype("<i2").tobytes())
    return buffer.getvalue()


def _upload(url: str, name: str, **fields: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/audio/voices",
        data={"name": name, "consent": "true", **fields},
        files={"audio": (f"{name}.wav", _wav(VOICE), "audio/wav")},
        timeout=60,
    )


def _whole_and_streamed(client: Any, **body: Any) -> np.ndarray:
    whole = client.audio.speech.create(**body, response_format="pcm").content
    with client.audio.speech.with_streaming_response.create(
        **body, response_format="pcm", stream_format="audio"
    ) as response:
        streamed = b"".join(response.iter_bytes())
    assert streamed == whole and whole
    return np.frombuffer(whole, "<i2") / 32767


def test_dias_own_voice_whole_and_streamed(client: Any, checkpoint: Path, url: str) -> None:
    voices = httpx.get(f"{url}/v1/audio/voices", timeout=10).json()["voices"]
    assert voices == ["default"]
    _, expected = reference_generate(checkpoint, TEXT)
    heard = _whole_and_streamed(
        client, model="dia", voice="default", input=TEXT, extra_body={"temperature": 0}
    )
    np.testing.assert_allclose(heard, np.clip(expected.numpy(), -1, 1), atol=LSB)


def test_an_uploaded_voice_is_cloned(client: Any, checkpoint: Path, url: str) -> None:
    response = _upload(url, "alice", transcript=TRANSCRIPT)
    assert response.status_code == 201, response.text
    _, expected = reference_generate(checkpoint, f"{TRANSCRIPT} {TEXT}", audio=VOICE)
    heard = _whole_and_streamed(
        client, model="dia", voice="alice", input=TEXT, extra_body={"temperature": 0}
    )
    np.testing.assert_allclose(heard, np.clip(expected.numpy(), -1, 1), atol=LSB)


def test_bad_input_is_a_400_with_an_openai_error(client: Any, url: str) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as error:
        client.audio.speech.create(model="dia", voice="nobody", input="[S1] Hi.")
    body = error.value.body
    assert isinstance(body, dict) and body["param"] == "voice" and body["message"], body
    with pytest.raises(openai.BadRequestError, match="max_new_tokens"):
        client.audio.speech.create(
            model="dia", voice="default", input="[S1] Hi.", extra_body={"max_new_tokens": 3}
        )
    response = _upload(url, "bob")  # no transcript: Dia cannot clone from audio alone
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "transcript"


def test_sse_deltas_arrive_as_chunks_and_make_the_whole_clip(client: Any, url: str) -> None:
    """``stream_format: sse``: the first delta is the first 8 frames (``first_chunk_frames``),
    the rest follow; together they are the whole answer's PCM."""
    import base64
    import json

    body = {"model": "dia", "voice": "default", "input": TEXT, "temperature": 0}
    whole = client.audio.speech.create(
        model="dia", voice="default", input=TEXT, response_format="pcm",
        extra_body={"temperature": 0},
    ).content  # fmt: skip
    deltas, done = [], None
    sse = {**body, "response_format": "pcm", "stream_format": "sse"}
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
    assert len(deltas) >= 2 and len(deltas[0]) == 2 * 8 * 8  # 8 frames of 8 samples, 16-bit
    assert b"".join(deltas) == whole


def test_omni_generate_speech_clones_as_the_server_does(
    client: Any, url: str, checkpoint: Path, tmp_path: Path
) -> None:
    """``--ref-audio FILE --ref-text TEXT`` is the body's voice prompt: the CLI's WAV holds the
    samples the server's holds for an uploaded voice of the same audio, seeded (sampled)."""
    from omni_core.testing import run_cli

    assert _upload(url, "carol", transcript=TRANSCRIPT).status_code == 201
    voice_file = tmp_path / "carol.wav"
    voice_file.write_bytes(_wav(VOICE))
    target = tmp_path / "cloned.wav"
    args = ["generate", "speech", TEXT, "--model", str(checkpoint), "--device", "cpu"]
    args += ["--ref-audio", str(voice_file), "--ref-text", TRANSCRIPT, "--seed", "3"]
    result = run_cli(*args, "-o", str(target), "-q")
    assert result.exit_code == 0, result.output
    served = client.audio.speech.create(
        model="dia", voice="carol", input=TEXT, response_format="wav", extra_body={"seed": 3}
    ).content

    def samples(raw: bytes) -> np.ndarray:
        with wave.open(io.BytesIO(raw)) as handle:
            assert handle.getframerate() == 44100
            return np.frombuffer(handle.readframes(handle.getnframes()), "<i2")

    mine = samples(target.read_bytes())
    assert mine.size > 0
    np.testing.assert_array_equal(mine, samples(served))
