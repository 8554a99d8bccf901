"""vLLM-Omni's own shapes on ``/v1/chat/completions``: its clients send ``messages`` (and
``extra_body``) but no ``audio`` object and often no ``modalities``; an omni model then answers
with text and speech, non-streamed as two choices (the text, then the audio as a base64 WAV),
streamed as chunks labelled ``"modality"`` whose audio ``delta.content`` is a base64 WAV of that
piece. ``--chat-modalities text`` keeps OpenAI's text-only default. Served by a real
``omni serve`` of the acme-chat test plugin (``chat_server``); the expected answer is the
plugin's plain ``generate()`` loop on the served weights."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from omni_core.chat import ChatMessage

from .chat_files import sse_events

CHAT = "/v1/chat/completions"
ASK = {"messages": [{"role": "user", "content": "tell me"}], "max_tokens": 8, "temperature": 0}


def _expected(acme_chat: Any, chat_server: Any) -> tuple[str, np.ndarray]:
    pipeline = chat_server.state.models["acme-omni"].pipeline
    messages = [ChatMessage.text("user", "tell me")]
    ids, audio = acme_chat.reference_answer(pipeline, messages, 8)
    return pipeline.tokenizer.decode(ids, skip_special_tokens=True), audio.numpy()


def _wav(data: str) -> np.ndarray:
    from omni_core.media import audio as codecs

    samples, _ = codecs.decode_audio(base64.b64decode(data), "wav")
    return samples


def test_vllm_omni_client_gets_text_and_audio_choices(acme_chat, chat_server, chat_http) -> None:
    text, audio = _expected(acme_chat, chat_server)
    response = chat_http.post(CHAT, json={"model": "acme-omni", **ASK})
    assert response.status_code == 200, response.text
    choices = response.json()["choices"]
    assert [c["index"] for c in choices] == [0, 0]
    assert choices[0]["message"]["content"] == text and "audio" not in choices[0]["message"]
    spoken = choices[1]["message"]
    assert spoken["content"] is None and spoken["audio"]["transcript"] == text
    np.testing.assert_allclose(_wav(spoken["audio"]["data"]), audio, atol=1.5 / 32767)
    # the same answer as OpenAI's shape gives for the same request with an audio object
    openai_shape = chat_http.post(
        CHAT,
        json={"model": "acme-omni", **ASK, "modalities": ["text", "audio"], "audio": {}},
    ).json()
    assert len(openai_shape["choices"]) == 1
    assert openai_shape["choices"][0]["message"]["audio"]["transcript"] == text
    # a text model answers in one choice, as before
    only_text = chat_http.post(CHAT, json={"model": "acme-text", **ASK}).json()
    assert len(only_text["choices"]) == 1 and only_text["choices"][0]["message"]["content"]


def test_vllm_omni_stream_labels_every_chunk(acme_chat, chat_server, chat_http) -> None:
    text, audio = _expected(acme_chat, chat_server)
    body = {"model": "acme-omni", **ASK, "stream": True, "stream_options": {"include_usage": True}}
    with chat_http.stream("POST", CHAT, json=body) as response:
        assert response.status_code == 200
        events = sse_events(response)
    usage = events.pop()
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] > 0
    assert {e["modality"] for e in events} == {"text", "audio"}
    texts = [e["choices"][0]["delta"].get("content", "") for e in events if e["modality"] == "text"]
    pieces = [e["choices"][0]["delta"].get("content") for e in events if e["modality"] == "audio"]
    pieces = [p for p in pieces if p]
    assert "".join(texts) == text and len(pieces) >= 1
    streamed = np.concatenate([_wav(p) for p in pieces])
    np.testing.assert_allclose(streamed, audio, atol=1.5 / 32767)
    finishes = [e["choices"][0]["finish_reason"] for e in events]
    assert finishes[-1] in ("stop", "length") and not any(finishes[:-1])


def test_chat_modalities_text_keeps_openais_default(chat_server, chat_http) -> None:
    config = chat_server.state.config
    before = config.chat_modalities
    object.__setattr__(config, "chat_modalities", "text")  # what --chat-modalities text sets
    try:
        response = chat_http.post(CHAT, json={"model": "acme-omni", **ASK})
    finally:
        object.__setattr__(config, "chat_modalities", before)
    choices = response.json()["choices"]
    assert len(choices) == 1 and "audio" not in choices[0]["message"]
