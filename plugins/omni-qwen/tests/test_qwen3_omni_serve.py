"""A tiny Qwen3-Omni through a real ``omni serve`` app on 127.0.0.1 and the official
``openai`` client: text + speech answers, whole and streamed, equal to transformers'
``generate()`` on the same checkpoint (offline)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

MODEL = "qwen3-omni-tiny"
MESSAGES = [{"role": "user", "content": "hello world"}]
SPOKEN = {"modalities": ["text", "audio"], "temperature": 0, "max_tokens": 24}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_qwen.testing import build_tiny_qwen3_omni

    torch.set_num_threads(2)
    return build_tiny_qwen3_omni(tmp_path_factory.mktemp("qwen3-omni-serve") / "tiny")


@pytest.fixture(scope="module")
def server(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """uvicorn serving omni's app on a thread; code2wav's context spans whole answers here, so
    the streamed audio is comparable with ``generate()``'s whole decode."""
    from omni_core.testing import serve_on_thread

    with serve_on_thread(
        models=[{"id": MODEL, "path": str(checkpoint)}],
        state_dir=tmp_path_factory.mktemp("qwen3-omni-state"),
        options={"left_context": 4096, "first_chunk_frames": 2, "chunk_frames": 3},
        dtype=None,
        warmup=True,
    ) as url:
        yield url


@pytest.fixture(scope="module")
def client(server: str) -> Any:
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def expected(checkpoint: Path) -> tuple[str, np.ndarray]:
    """transformers' answer and speech for :data:`MESSAGES` (greedy, talker greedy)."""
    from transformers import Qwen3OmniMoeForConditionalGeneration

    from omni_core.chat import ChatMessage
    from omni_qwen.omni.qwen3_prompt import encode, load_processor

    processor, videos = load_processor(checkpoint)
    model = Qwen3OmniMoeForConditionalGeneration.from_pretrained(checkpoint).eval()
    inputs = encode(processor, [ChatMessage.text("user", "hello world")], videos=videos)
    end = [model.config.im_end_token_id]
    sequences, wav = model.generate(
        **inputs,
        speaker="ethan",
        thinker_max_new_tokens=24,
        thinker_do_sample=False,
        thinker_eos_token_id=end,
        talker_do_sample=False,
    )
    made = sequences[0, inputs["input_ids"].shape[1] :].tolist()
    made = made[: made.index(end[0])] if end[0] in made else made
    text = processor.tokenizer.decode(made, skip_special_tokens=True)
    return text, wav.reshape(-1).float().numpy()


def _pcm16(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32767.0


def test_spoken_answer_equals_generate(client: Any, expected: tuple[str, np.ndarray]) -> None:
    text, wav = expected
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, audio={"voice": "Ethan", "format": "pcm16"}, **SPOKEN
    )
    assert raw.headers["x-omni-sample-rate"] == "24000"
    completion = raw.parse()
    message = completion.choices[0].message
    assert message.content == text and message.audio.transcript == text
    assert completion.choices[0].finish_reason == "stop"
    samples = _pcm16(base64.b64decode(message.audio.data))
    assert samples.shape == wav.shape
    np.testing.assert_allclose(samples, np.clip(wav, -1, 1), atol=1e-4 + 1.5 / 32767)


def test_streamed_answer_concatenates_to_the_whole(client: Any) -> None:
    body = {"model": MODEL, "messages": MESSAGES, "audio": {"voice": "ethan", "format": "pcm16"}}
    whole = client.chat.completions.create(**body, **SPOKEN).choices[0].message
    content, pieces = [], []
    for chunk in client.chat.completions.create(**body, **SPOKEN, stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content.append(delta.content or "")
        audio = delta.to_dict().get("audio") or {}
        if "data" in audio:
            pieces.append(base64.b64decode(audio["data"]))
    assert "".join(content) == whole.content
    # streamed: code2wav chunks with left context back to the start; whole: one decode. The
    # same samples, up to float rounding (one 16-bit step)
    streamed = np.frombuffer(b"".join(pieces), np.int16).astype(np.int32)
    one = np.frombuffer(base64.b64decode(whole.audio.data), np.int16).astype(np.int32)
    assert len(pieces) > 2 and streamed.shape == one.shape
    assert np.abs(streamed - one).max() <= 1


def test_text_answer_and_voices(client: Any, server: str, expected: tuple[str, np.ndarray]) -> None:
    import httpx

    completion = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, temperature=0, max_tokens=24
    )
    assert completion.choices[0].message.content == expected[0]
    assert completion.choices[0].message.audio is None
    voices = httpx.get(f"{server}/v1/audio/voices", timeout=30).json()
    assert voices["voices"] == ["aiden", "chelsie", "ethan"]
    assert {v["model"] for v in voices["data"]} == {MODEL}
    with pytest.raises(openai.BadRequestError, match="voice"):
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, audio={"voice": "nobody", "format": "wav"}, **SPOKEN
        )


def test_python_api_answers_as_generate(checkpoint: Path, expected: tuple[str, np.ndarray]) -> None:
    """``Omni(...).chat``: the registry finds the pipeline by the checkpoint's architecture."""
    from omni_core import Omni

    omni = Omni(str(checkpoint), device="cpu", left_context=4096)
    assert type(omni.pipeline).__name__ == "Qwen3OmniPipeline"
    result = omni.chat("hello world", modalities=["text", "audio"], temperature=0, max_tokens=24)
    text, wav = expected
    assert result.text == text and result.sample_rate == 24000
    assert result.info["finish_reason"] == "stop"
    np.testing.assert_allclose(result.audio, wav, atol=1e-4, rtol=0)
    streamed = list(omni.chat_stream("hello world", temperature=0, max_tokens=24))
    assert "".join(d.text for d in streamed) == text and streamed[-1].usage is not None
