"""VibeVoice served by one real ``omni serve`` (127.0.0.1) to the official clients.

The ``openai`` client asks for speech whole and streamed in a built-in voice, in a voice
uploaded through ``POST /v1/audio/voices`` (cloned from its audio) and as a two-speaker script
(``speakers``); the ``websockets`` client speaks text through ``/v1/audio/speech/stream``. Each
answer equals transformers' ``generate()`` on the same inputs and seed, to 16-bit PCM. The
checkpoint is the dialogue tests' (160-sample frames, weights seed 5: it speaks after a 0.5 s
voice prompt, the shortest upload the server takes).
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
import torch
from omni_core.testing.services import omni_serve, speak_over_websocket

from omni_vibevoice.testing import build_tiny_vibevoice

#: The uploaded voice: 0.5 s of 16-bit noise (what the server decodes is exactly these values).
VOICE = (np.round(np.random.default_rng(0).standard_normal(12000) * 3277) / 32768).astype(
    np.float32
)
LSB = 2 / 32767


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("vibevoice-served") / "tiny"
    return build_tiny_vibevoice(folder, seed=5, ratios=(4, 5, 8))


@pytest.fixture(scope="module")
def url(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One ``omni serve`` of the checkpoint for the module (no warm-up: the tiny model speaks
    for some inputs only)."""
    root = tmp_path_factory.mktemp("vibevoice-serve")
    args = [f"vibevoice={checkpoint}", "--device", "cpu", "--state-dir", str(root / "state")]
    with omni_serve(*args, "--log-level", "warning", "--no-warmup", log=root / "serve.log") as base:
        yield base


@pytest.fixture(scope="module")
def reference(checkpoint: Path) -> Any:
    """``generate()`` on a conversation ((speaker, text) lines, voice prompts by speaker)."""
    from transformers import AutoProcessor, VibeVoiceForConditionalGeneration

    model = VibeVoiceForConditionalGeneration.from_pretrained(checkpoint).eval()
    processor = AutoProcessor.from_pretrained(checkpoint)

    def run(lines: list[tuple[int, str]], prompts: dict[int, np.ndarray], seed: int) -> Any:
        conversation, given = [], set()
        for speaker, text in lines:
            parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
            if speaker in prompts and speaker not in given:
                parts.append({"type": "audio", "audio": prompts[speaker]})
                given.add(speaker)
            conversation.append({"role": str(speaker), "content": parts})
        inputs = processor.apply_chat_template(
            conversation, tokenize=True, return_dict=True, return_tensors="pt"
        )
        torch.manual_seed(seed)
        audio = model.generate(**inputs, return_dict_in_generate=True).audio[0]
        assert audio is not None, "pick inputs the tiny model speaks for"
        return np.clip(audio.reshape(-1).float().numpy(), -1, 1)

    return run


@pytest.fixture(scope="module")
def client(url: str) -> Any:
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def uploaded(url: str) -> str:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(24000)
        out.writeframes((VOICE * 32768).astype("<i2").tobytes())
    response = httpx.post(
        f"{url}/v1/audio/voices",
        data={"name": "alice", "consent": "true"},
        files={"audio": ("alice.wav", buffer.getvalue(), "audio/wav")},
        timeout=60,
    )
    assert response.status_code == 201, response.text
    return "alice"


def _pcm(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, "<i2") / 32767


def _whole_and_streamed(client: Any, **body: Any) -> tuple[np.ndarray, bytes]:
    extra = body.pop("extra_body")
    whole = client.audio.speech.create(**body, response_format="pcm", extra_body=extra).content
    with client.audio.speech.with_streaming_response.create(
        **body, response_format="pcm", stream_format="audio", extra_body=extra
    ) as response:
        streamed = b"".join(response.iter_bytes())
    assert streamed == whole
    return _pcm(whole), whole


def test_a_built_in_voice_whole_and_streamed(client: Any, reference: Any, url: str) -> None:
    import openai

    voices = httpx.get(f"{url}/v1/audio/voices", timeout=10).json()["voices"]
    assert voices[:4] == ["speaker_0", "speaker_1", "speaker_2", "speaker_3"]
    expected = reference([(0, "Hello there.")], {}, 0)
    heard, _ = _whole_and_streamed(
        client, model="vibevoice", voice="speaker_0", input="Hello there.", extra_body={"seed": 0}
    )
    np.testing.assert_allclose(heard, expected, atol=LSB)
    with pytest.raises(openai.BadRequestError, match="voice"):
        client.audio.speech.create(model="vibevoice", voice="nobody", input="Hi.")


def test_an_uploaded_voice_is_cloned(client: Any, reference: Any, uploaded: str) -> None:
    expected = reference([(0, "Hello there.")], {0: VOICE}, 0)
    heard, _ = _whole_and_streamed(
        client, model="vibevoice", voice=uploaded, input="Hello there.", extra_body={"seed": 0}
    )
    np.testing.assert_allclose(heard, expected, atol=LSB)


def test_a_dialogue_with_an_uploaded_and_a_built_in_voice(
    client: Any, reference: Any, uploaded: str
) -> None:
    import openai

    script = "Speaker 1: Hello there.\nSpeaker 2: Hi!"
    expected = reference([(1, "Hello there."), (3, "Hi!")], {1: VOICE}, 0)
    extra = {"seed": 0, "speakers": {"1": uploaded, "2": "speaker_3"}}
    heard, _ = _whole_and_streamed(
        client, model="vibevoice", voice="speaker_0", input=script, extra_body=extra
    )
    np.testing.assert_allclose(heard, expected, atol=LSB)
    with pytest.raises(openai.BadRequestError, match="speakers"):
        client.audio.speech.create(
            model="vibevoice", voice="speaker_0", input=script, extra_body={"speakers": {"1": "x"}}
        )


def test_the_websocket_text_stream_speaks(url: str, reference: Any) -> None:
    session = {"model": "vibevoice", "voice": "speaker_0", "response_format": "pcm", "seed": 0}
    spoken = speak_over_websocket(url, session, ["Hello ", "there."])
    events = [e["type"] for e in spoken.events]
    assert events == ["audio.start", "audio.done", "session.done"], spoken.events
    expected = reference([(0, "Hello there.")], {}, 0)
    np.testing.assert_allclose(_pcm(spoken.audio), expected, atol=LSB)


def _sentences(received: list[Any]) -> list[tuple[str, bytes]]:
    """(sentence_text, its audio) per sentence of a session, in order."""
    out: list[tuple[str, bytes]] = []
    for item in received:
        if isinstance(item, bytes):
            out[-1] = (out[-1][0], out[-1][1] + item)
        elif item["type"] == "audio.start":
            out.append((item["sentence_text"], b""))
        else:
            assert item["type"] in ("audio.done", "session.done"), item
            assert not item.get("error"), item
    return out


def test_a_two_speaker_script_streamed_as_text_equals_http_sentence_by_sentence(
    url: str, client: Any
) -> None:
    """The text stream speaks each sentence as its line's speaker: a continuation sentence opens
    with the line's label ("Speaker 1:"), so its audio is ``POST /v1/audio/speech`` of that
    labelled sentence with the speakers it uses, not the default voice's."""
    config = {"model": "vibevoice", "voice": "speaker_0", "response_format": "pcm", "seed": 0}
    config["speakers"] = {"1": "speaker_3"}  # Speaker 2 keeps its own voice
    pieces = ["Speaker 1: Hi! A longer sen", "tence, to speak.\nSpeaker 2: Hi! A longer ",
              "sentence, to speak."]  # fmt: skip
    spoken = _sentences(speak_over_websocket(url, config, pieces).messages)
    assert [text for text, _ in spoken] == [
        "Speaker 1: Hi!",
        "Speaker 1: A longer sentence, to speak.",
        "Speaker 2: Hi!",
        "Speaker 2: A longer sentence, to speak.",
    ]

    def http(text: str, speakers: dict[str, str]) -> bytes:
        extra = {"seed": 0, **({"speakers": speakers} if speakers else {})}
        body = {"model": "vibevoice", "voice": "speaker_0", "input": text}
        return client.audio.speech.create(**body, response_format="pcm", extra_body=extra).content

    for text, audio in spoken:
        assert audio, text
        assert audio == http(text, {"1": "speaker_3"} if text.startswith("Speaker 1") else {})
    # without the label the continuation would be the default voice's: different audio
    unlabelled = http("A longer sentence, to speak.", {})
    assert unlabelled != spoken[1][1] and unlabelled != spoken[3][1]
    assert spoken[1][1] != spoken[3][1]  # speaker 3's voice is not speaker 2's


def test_a_text_stream_session_checks_its_speakers_at_config(url: str) -> None:
    config = {"model": "vibevoice", "voice": "speaker_0", "speakers": {"1": "nobody"}}
    events = speak_over_websocket(url, config, ["Speaker 1: Hi!"]).events
    assert events[0]["type"] == "error" and events[0]["param"] == "speakers", events
    assert "unknown voice 'nobody'" in events[0]["message"]
    config["speakers"] = {"7": "speaker_1"}
    events = speak_over_websocket(url, config, ["Speaker 1: Hi!"]).events
    assert events[0]["type"] == "error" and "not a speaker label" in events[0]["message"]


def _read_wav(raw: bytes) -> tuple[np.ndarray, int]:
    with wave.open(io.BytesIO(raw)) as handle:
        frames = handle.readframes(handle.getnframes())
        return np.frombuffer(frames, "<i2"), handle.getframerate()


def test_omni_generate_speech_with_speakers_equals_http(
    checkpoint: Path, client: Any, uploaded: str, tmp_path: Path
) -> None:
    """``--speaker LABEL=VOICE`` (a voice id, or an audio file to clone) is the body's
    ``speakers``: the CLI's WAV holds the samples the server's WAV holds for the same request."""
    from omni_core.testing import run_cli

    voice_file = tmp_path / "alice.wav"  # the samples the uploaded voice holds
    with wave.open(str(voice_file), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(24000)
        out.writeframes((VOICE * 32768).astype("<i2").tobytes())
    script = "Speaker 1: Hello there.\nSpeaker 2: Hi!"
    target = tmp_path / "dialogue.wav"
    args = ["generate", "speech", script, "--model", str(checkpoint), "--device", "cpu"]
    args += ["--speaker", f"1={voice_file}", "--speaker", "2=speaker_3", "--seed", "0"]
    result = run_cli(*args, "-o", str(target), "-q")
    assert result.exit_code == 0, result.output
    served = client.audio.speech.create(
        model="vibevoice",
        voice="speaker_0",
        input=script,
        response_format="wav",
        extra_body={"seed": 0, "speakers": {"1": uploaded, "2": "speaker_3"}},
    ).content
    mine, rate = _read_wav(target.read_bytes())
    theirs, served_rate = _read_wav(served)
    assert rate == served_rate == 24000
    assert mine.size > 0
    np.testing.assert_array_equal(mine, theirs)


@pytest.mark.parametrize(
    ("speakers", "message"),
    [
        ([f"{i}=speaker_0" for i in range(5)], "speakers: 5 voices; this model speaks at most 4"),
        (["1=nobody"], "unknown voice 'nobody'"),
        (["1"], "expected LABEL=VOICE"),
        (["9=speaker_0"], "'9' is not a speaker label"),
    ],
)
def test_omni_generate_speech_refuses_bad_speakers_in_one_line(
    checkpoint: Path, tmp_path: Path, speakers: list[str], message: str
) -> None:
    from omni_core.testing import run_cli

    target = tmp_path / "out.wav"
    args = ["generate", "speech", "Speaker 1: Hi!", "--model", str(checkpoint), "--device", "cpu"]
    args += [a for s in speakers for a in ("--speaker", s)]
    result = run_cli(*args, "-o", str(target), "-q")
    assert result.exit_code == 2, result.output
    # one error line, the last (before it: transformers' weight-loading bar; click's usage)
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert result.stderr.strip().splitlines()[-1] == errors[0]
    assert "Traceback" not in result.output and not target.exists()
