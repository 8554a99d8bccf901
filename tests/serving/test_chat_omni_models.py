"""The real omni families (tiny Qwen2.5-Omni and Qwen3-Omni, built by omni-qwen in their official
layouts) through ``/v1/chat/completions`` with the official ``openai`` client: text + audio,
whole and streamed, a media part in, their voices listed. Their fidelity against transformers is
omni-qwen's own tests; this is the route's side: the shapes every omni model answers in.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from .chat_files import data_url, png_bytes, wav_bytes
from .conftest import OMNI_MODELS


def _voice(chat_server: Any, model: str) -> str:
    voices = [v.id for v in chat_server.state.models[model].pipeline.voices()]
    assert voices, f"{model} lists no voices"
    return voices[-1]


@pytest.mark.parametrize("model", OMNI_MODELS)
def test_omni_model_answers_text_and_speech(chat_server, chat_client, chat_http, model) -> None:
    from omni_core.media import audio as codecs

    chat_server.need(model)
    voice = _voice(chat_server, model)
    listed = chat_http.get("/v1/audio/voices", params={"model": model}).json()
    assert voice in listed["voices"]
    described = chat_http.get(f"/v1/models/{model}").json()
    assert described["modality"] == "chat" and described["modalities"] == ["text", "audio"]
    content = [
        {"type": "text", "text": "What do you see and hear?"},
        {"type": "image_url", "image_url": {"url": data_url(png_bytes((32, 32)), "image/png")}},
        {
            "type": "input_audio",
            "input_audio": {"data": base64.b64encode(wav_bytes(1.0)).decode(), "format": "wav"},
        },
    ]
    body = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "modalities": ["text", "audio"],
        "max_tokens": 8,
        "temperature": 0,
    }
    raw = chat_client.chat.completions.with_raw_response.create(
        **body, audio={"voice": voice, "format": "pcm16"}
    )
    rate = int(raw.headers["x-omni-sample-rate"])
    whole = raw.parse()
    message = whole.choices[0].message
    assert message.audio.transcript == message.content
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage.prompt_tokens > 0 and whole.usage.completion_tokens <= 8
    pcm = base64.b64decode(message.audio.data)
    samples, _ = codecs.decode_audio(pcm, "pcm", rate)
    assert len(samples) > 0 or not message.content  # a spoken answer when it says anything
    streamed_text, pieces = "", []
    for chunk in chat_client.chat.completions.create(
        **body, audio={"voice": voice, "format": "pcm16"}, stream=True
    ):
        if chunk.choices:
            streamed_text += chunk.choices[0].delta.content or ""
            audio = chunk.choices[0].delta.to_dict().get("audio") or {}
            pieces.append(base64.b64decode(audio.get("data", "")))
    assert streamed_text == message.content  # greedy: the same answer
    assert bool(b"".join(pieces)) == bool(pcm)
