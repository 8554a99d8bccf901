"""``/v1/chat/completions`` for chat models on a real ``omni serve`` (uvicorn on 127.0.0.1),
driven by the official ``openai`` client and raw httpx: text answers, spoken answers in every
format, OpenAI's chat-audio streaming shape, media parts decoded into the model's input,
multi-turn audio, voices and models, an image model served beside chat models.

The models (the ``chat_server`` fixture) come from the third-party test plugin
``tests/acme_chat.py``: ``acme-text`` (a tiny Qwen2 chat model) and ``acme-omni`` (the same with
a talker that speaks its answers). Expected answers come from the plugin's plain loop
(transformers ``generate``) on the served pipeline's own weights.
"""

from __future__ import annotations

import base64
import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from omni_core.chat import ChatMessage

from .chat_files import data_url, error_of, mp4_bytes, png_bytes, sse_events, wav_bytes
from .conftest import free_port

CHAT = "/v1/chat/completions"
SPOKEN = {"modalities": ["text", "audio"]}


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A plain file server on 127.0.0.1 (an allowed URL host of the chat server)."""
    root = tmp_path_factory.mktemp("files")
    (root / "tone.wav").write_bytes(wav_bytes(0.75))
    (root / "blue.png").write_bytes(png_bytes((20, 10)))
    handler = functools.partial(_Quiet, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _pipeline(server: Any, model: str) -> Any:
    return server.state.models[model].pipeline


def _expected(
    acme_chat,
    server: Any,
    model: str,
    messages: list[ChatMessage],
    max_tokens: int,
    voice: str = "ada",
) -> tuple[str, list[int], Any]:
    """The plain loop's answer text, its token ids and its audio (None without a talker)."""
    pipeline = _pipeline(server, model)
    ids, audio = acme_chat.reference_answer(pipeline, messages, max_tokens, voice=voice)
    return pipeline.tokenizer.decode(ids, skip_special_tokens=True), ids, audio


def test_text_answer_openai_client(acme_chat, chat_server, chat_client) -> None:
    messages = [ChatMessage.text("system", "be brief"), ChatMessage.text("user", "hello there")]
    text, ids, _ = _expected(acme_chat, chat_server, "acme-text", messages, 10)
    completion = chat_client.chat.completions.create(
        model="acme-text",
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello there"},
        ],
        max_completion_tokens=10,
        temperature=0,
    )
    assert completion.object == "chat.completion" and completion.id.startswith("chatcmpl-")
    choice = completion.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == text
    assert choice.message.audio is None
    assert choice.finish_reason == ("length" if len(ids) == 10 else "stop")
    prompt = len(_pipeline(chat_server, "acme-text").prompt_ids(messages))
    assert completion.usage.prompt_tokens == prompt
    assert completion.usage.completion_tokens == len(ids)
    assert completion.usage.total_tokens == prompt + len(ids)


def test_text_stream_deltas_concatenate(chat_server, chat_client, chat_http) -> None:
    body = {
        "model": "acme-text",
        "messages": [{"role": "user", "content": "stream it"}],
        "max_tokens": 12,
    }
    whole = chat_client.chat.completions.create(**body)
    chunks = list(
        chat_client.chat.completions.create(
            **body, stream=True, stream_options={"include_usage": True}
        )
    )
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finished = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finished[-1] == whole.choices[0].finish_reason and not any(finished[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    with chat_http.stream("POST", CHAT, json={**body, "stream": True}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events) == text
    assert all("usage" not in e for e in events)  # only with stream_options.include_usage


@pytest.mark.parametrize("fmt", ["wav", "mp3", "flac", "pcm16"])
def test_spoken_answer_formats(acme_chat, chat_server, chat_client, fmt) -> None:
    from omni_core.media import audio as codecs

    messages = [ChatMessage.text("user", "say something")]
    text, _, audio = _expected(acme_chat, chat_server, "acme-omni", messages, 8, voice="bob")
    raw = chat_client.chat.completions.with_raw_response.create(
        model="acme-omni",
        messages=[{"role": "user", "content": "say something"}],
        max_tokens=8,
        audio={"voice": "bob", "format": fmt},
        **SPOKEN,
    )
    assert raw.headers["x-omni-sample-rate"] == str(acme_chat.SAMPLE_RATE)
    completion = raw.parse()
    message = completion.choices[0].message
    assert message.content == text and message.audio.transcript == text
    assert message.audio.id.startswith("audio_") and message.audio.expires_at > completion.created
    data = base64.b64decode(message.audio.data)
    expected = audio.numpy()
    if fmt == "mp3":  # lossy, with encoder padding: as long, give or take a frame
        samples, rate = codecs.decode_audio(data, "mp3")
        assert rate == acme_chat.SAMPLE_RATE and abs(len(samples) - len(expected)) <= 1200
        return
    samples, _ = codecs.decode_audio(data, "pcm" if fmt == "pcm16" else fmt, 16000)
    np.testing.assert_allclose(samples, expected, atol=1.5 / 32767)


@pytest.mark.parametrize("fmt", ["pcm16", "wav", "mp3"])
def test_spoken_stream_openai_client(chat_server, chat_client, fmt) -> None:
    from omni_core.media import audio as codecs

    body = {
        "model": "acme-omni",
        "messages": [{"role": "user", "content": "speak up"}],
        "max_tokens": 10,
        **SPOKEN,
    }
    whole = chat_client.chat.completions.create(**body, audio={"voice": "ada", "format": "pcm16"})
    stream = chat_client.chat.completions.create(
        **body, audio={"voice": "ada", "format": fmt}, stream=True
    )
    content, transcript, pieces, ids, audio_events = [], [], [], set(), 0
    finish = None
    for chunk in stream:
        delta = chunk.choices[0].delta
        content.append(delta.content or "")
        audio = delta.to_dict().get("audio")
        if audio:
            ids.add(audio["id"])
            transcript.append(audio.get("transcript", ""))
            if "data" in audio:
                audio_events += 1
                pieces.append(base64.b64decode(audio["data"]))
        finish = chunk.choices[0].finish_reason or finish
    message = whole.choices[0].message
    assert "".join(content) == "".join(transcript) == message.content
    assert len(ids) == 1 and audio_events > 1 and finish == whole.choices[0].finish_reason
    streamed = b"".join(pieces)
    whole_pcm = base64.b64decode(message.audio.data)
    if fmt == "mp3":  # one mp3 stream: as long, plus the encoder's delay and padding (a streamed
        samples, _ = codecs.decode_audio(streamed, "mp3")  # mp3 has no header to trim them by)
        assert 0 <= len(samples) - len(whole_pcm) // 2 <= 4 * 576
        return
    if fmt == "wav":  # a streaming header ("unknown length"), then the same PCM
        samples, _ = codecs.decode_audio(streamed, "wav")
        streamed = codecs.to_int16(samples).tobytes()
    assert streamed == whole_pcm


def test_media_parts_reach_the_model(acme_chat, chat_server, chat_client, files) -> None:
    long_clip = mp4_bytes(140, (16, 16), 10)
    content = [
        {"type": "text", "text": "describe"},
        {"type": "image_url", "image_url": {"url": data_url(png_bytes((32, 24)), "image/png")}},
        {
            "type": "input_audio",
            "input_audio": {"data": base64.b64encode(wav_bytes(1.0)).decode(), "format": "wav"},
        },
        {
            "type": "video_url",
            "video_url": {"url": data_url(mp4_bytes(8, (32, 24), 4), "video/mp4")},
        },
        {
            "type": "video_url",
            "video_url": {"url": data_url(mp4_bytes(6, (16, 16), 6, 0.5), "video/quicktime")},
        },
        {"type": "video_url", "video_url": {"url": data_url(long_clip, "video/mp4")}},
        {"type": "audio_url", "audio_url": {"url": f"{files}/tone.wav"}},
        {"type": "image_url", "image_url": {"url": f"{files}/blue.png"}},
    ]
    content[1]["image_url"]["detail"] = "low"  # OpenAI's resizing hint: reported, not used
    content.append({"type": "video_url", "video_url": {"url": content[3]["video_url"]["url"],
                                                       "num_frames": 5}})  # fmt: skip
    raw = chat_client.chat.completions.with_raw_response.create(
        model="acme-text", messages=[{"role": "user", "content": content}], max_tokens=6
    )
    assert raw.headers["x-omni-ignored-fields"] == "messages[0].content[1].image_url.detail"
    adjusted = raw.headers["x-omni-adjusted-fields"]
    assert "140 frames -> 128" in adjusted and "content[5].video_url" in adjusted
    caption = (
        "describe[image 32x24][audio 1.00 s at 16000 Hz][video 8x32x24 at 4 fps]"
        "[video 6x16x16 at 6 fps with 0.50 s of sound]"
        f"[video 128x16x16 at {10 * 128 / 140:.3g} fps][audio 0.75 s at 16000 Hz]"
        "[image 20x10][video 5x32x24 at 2.5 fps]"
    )
    messages = [ChatMessage.text("user", caption)]
    text, _, _ = _expected(acme_chat, chat_server, "acme-text", messages, 6)
    completion = raw.parse()
    assert completion.choices[0].message.content == text
    pipeline = _pipeline(chat_server, "acme-text")
    assert completion.usage.prompt_tokens == len(pipeline.prompt_ids(messages))


def test_multi_turn_reads_earlier_answers_and_audio_ids(
    chat_server, chat_client, chat_http
) -> None:
    first = chat_client.chat.completions.create(
        model="acme-omni",
        messages=[{"role": "user", "content": "one"}],
        max_tokens=6,
        audio={"voice": "ada", "format": "wav"},
        **SPOKEN,
    )
    said = first.choices[0].message
    by_id = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "audio": {"id": said.audio.id}},
        {"role": "user", "content": "two"},
    ]
    by_text = [by_id[0], {"role": "assistant", "content": said.content}, by_id[2]]
    answers = [
        chat_client.chat.completions.create(model="acme-omni", messages=m, max_tokens=6)
        for m in (by_id, by_text)
    ]
    assert answers[0].choices[0].message.content == answers[1].choices[0].message.content
    assert answers[0].usage.prompt_tokens == answers[1].usage.prompt_tokens
    assert answers[0].usage.prompt_tokens > first.usage.prompt_tokens
    gone = [by_id[0], {"role": "assistant", "audio": {"id": "audio_nope"}}, by_id[2]]
    error = error_of(chat_http.post(CHAT, json={"model": "acme-omni", "messages": gone}), 400)
    assert "audio.id" in error["message"] and error["param"] == "messages[1]"


def test_voices_and_models_list_the_chat_models(chat_server, chat_http) -> None:
    voices = chat_http.get("/v1/audio/voices").json()
    spoken = {(v["id"], v["model"]) for v in voices["data"]}
    assert {("ada", "acme-omni"), ("bob", "acme-omni")} <= spoken
    assert {"ada", "bob"} <= set(voices["voices"])
    assert not any(model == "acme-text" for _, model in spoken)
    only = chat_http.get("/v1/audio/voices", params={"model": "acme-omni"}).json()
    assert {v["model"] for v in only["data"]} == {"acme-omni"}
    models = {m["id"]: m for m in chat_http.get("/v1/models").json()["data"]}
    assert models["acme-omni"]["modality"] == "chat" and models["acme-omni"]["tasks"] == ["chat"]
    assert models["acme-omni"]["modalities"] == ["text", "audio"]
    assert models["acme-omni"]["voices"] == ["ada", "bob"]
    assert models["acme-text"]["modalities"] == ["text"] and models["acme-text"]["voices"] == []


def test_image_model_beside_chat_models(chat_server, chat_http) -> None:
    chat_server.need("qwen")
    knobs = {"size": "32x32", "num_inference_steps": 2, "seed": 1}
    turn = [{"role": "user", "content": "a red fox"}]
    for body in ({"model": "qwen", "messages": turn}, {"messages": turn, "modalities": ["image"]}):
        response = chat_http.post(CHAT, json={**body, **knobs})
        assert response.status_code == 200, response.text
        part = response.json()["choices"][0]["message"]["content"][0]
        assert part["image_url"]["url"].startswith("data:image/png;base64,")
    error = error_of(chat_http.post(CHAT, json={"messages": turn}), 400, "model")
    assert error["code"] == "missing_required_parameter"
    error_of(
        chat_http.post(CHAT, json={"model": "qwen", "messages": turn, **SPOKEN}), 400, "modalities"
    )


def test_seeded_sampling_is_reproducible_and_concurrent_answers_equal_alone(
    chat_server, chat_client
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    asks = [
        {
            "model": "acme-omni",
            "messages": [{"role": "user", "content": f"story {i}"}],
            "max_tokens": 8,
            "temperature": 0.9,
            "top_p": 0.9,
            "seed": i,
        }
        for i in range(4)
    ]
    alone = [chat_client.chat.completions.create(**a).choices[0].message.content for a in asks]
    again = chat_client.chat.completions.create(**asks[1]).choices[0].message.content
    assert again == alone[1]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda a: chat_client.chat.completions.create(**a), asks))
    assert [c.choices[0].message.content for c in together] == alone
    greedy = chat_client.chat.completions.create(**{**asks[1], "temperature": 0, "seed": 99})
    assert (
        greedy.choices[0].message.content
        == chat_client.chat.completions.create(**{**asks[1], "temperature": 0, "seed": 5})
        .choices[0]
        .message.content
    )
