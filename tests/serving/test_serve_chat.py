"""``/v1/chat/completions`` for image models, driven the way vLLM-Omni's docs show: the official
``openai`` client with ``extra_body``, streaming, and raw httpx bodies with a nested
``extra_body`` object and ``image_url`` parts."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import pytest

from .chat_files import error_of
from .conftest import QWEN_SIZE

CHAT = "/v1/chat/completions"


def _png(size: tuple[int, int] = (32, 32), color: str = "red") -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def _data_url(blob: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(blob).decode()


def _image_of(part: dict) -> tuple[int, int]:
    from PIL import Image

    url = part["image_url"]["url"]
    assert part["type"] == "image_url" and url.startswith("data:image/png;base64,")
    with Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))) as img:
        return img.size


def test_chat_t2i_openai_client(live_server, openai_client) -> None:
    live_server.need("qwen")
    raw = openai_client.chat.completions.with_raw_response.create(
        model="qwen",
        messages=[{"role": "user", "content": "a red fox in the snow"}],
        temperature=0.7,
        extra_body={"extra_body": {**QWEN_SIZE, "num_inference_steps": 2, "seed": 3}},
    )
    assert "temperature" in raw.headers["x-omni-ignored-fields"]
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    content = choice.message.content
    assert isinstance(content, list) and len(content) == 1
    assert _image_of(content[0]) == (32, 32)
    assert completion.usage is not None


def test_chat_top_level_knobs_n_and_seed_reproducible(live_server, http) -> None:
    live_server.need("qwen")
    body = {
        "model": "qwen",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "a lighthouse"}]}],
        "width": 32,
        "height": 32,
        "num_inference_steps": 2,
        "true_cfg_scale": 4.0,
        "seed": 11,
        "n": 2,
    }
    first = http.post(CHAT, json=body)
    assert first.status_code == 200, first.text
    choices = first.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1]
    again = http.post(CHAT, json=body).json()["choices"]
    assert again[0]["message"]["content"] == choices[0]["message"]["content"]


def test_chat_i2i_data_url(live_server, http) -> None:
    live_server.need("qwen-edit")
    body = {
        "model": "qwen-edit",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Convert this image to watercolor style"},
                    {"type": "image_url", "image_url": {"url": _data_url(_png())}},
                ],
            }
        ],
        "extra_body": {**QWEN_SIZE, "num_inference_steps": 2, "guidance_scale": 4.0, "seed": 1},
    }
    response = http.post(CHAT, json=body)
    assert response.status_code == 200, response.text
    assert _image_of(response.json()["choices"][0]["message"]["content"][0]) == (32, 32)


def test_chat_streaming_openai_client(live_server, openai_client) -> None:
    live_server.need("qwen")
    stream = openai_client.chat.completions.create(
        model="qwen",
        messages=[{"role": "user", "content": "a koi pond"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_body={**QWEN_SIZE, "num_inference_steps": 2},
    )
    chunks = list(stream)
    assert chunks[0].object == "chat.completion.chunk"
    assert chunks[0].choices[0].delta.role == "assistant"
    final = [c for c in chunks if c.choices and c.choices[0].finish_reason == "stop"]
    assert len(final) == 1
    assert _image_of(final[0].choices[0].delta.content[0]) == (32, 32)
    assert chunks[-1].usage is not None


def test_chat_streaming_raw_sse(live_server, http) -> None:
    live_server.need("qwen")
    body = {
        "model": "qwen",
        "messages": [{"role": "user", "content": "a sailboat"}],
        "stream": True,
        "extra_body": {**QWEN_SIZE, "num_inference_steps": 2},
    }
    with http.stream("POST", CHAT, json=body) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    last = json.loads(lines[-2][6:])
    assert last["choices"][0]["delta"]["content"][0]["type"] == "image_url"


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "system", "content": "be nice"}]}, "messages"),
        ({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}, None),
        ({"modalities": ["text"]}, "modalities"),
        ({"tools": [{"type": "function"}]}, "tools"),
        ({"extra_body": {"num_inference_steps": 0}}, "num_inference_steps"),
        ({"extra_body": {"width": 32}}, "width"),
        ({"extra_body": {"seed": 1}, "seed": 2}, "seed"),
        ({"extra_body": "not an object"}, "extra_body"),
        ({"logprobs": True}, "logprobs"),
        ({"extra_body": {"not_a_knob": 1}}, "not_a_knob"),
    ],
)
def test_chat_invalid_requests(live_server, http, change, param) -> None:
    live_server.need("qwen")
    body = {"model": "qwen", "messages": [{"role": "user", "content": "x"}], **change}
    error_of(http.post(CHAT, json=body), 400, param)


def test_chat_reads_every_user_turn_and_refuses_other_roles(live_server, http) -> None:
    """As vLLM-Omni: the user messages' texts, in order, are the prompt (and their images the
    inputs); a system or developer turn is reported as ignored, an assistant turn is a 400."""
    live_server.need("qwen")
    knobs = {"size": "32x32", "num_inference_steps": 2, "seed": 5}

    def image(messages: list[dict[str, Any]]) -> str:
        response = http.post(CHAT, json={"model": "qwen", "messages": messages, **knobs})
        assert response.status_code == 200, response.text
        assert "messages" not in response.headers.get("x-omni-ignored-fields", "")
        return response.json()["choices"][0]["message"]["content"][0]["image_url"]["url"]

    turns = [{"role": "user", "content": "a red barn"}, {"role": "user", "content": "at night"}]
    both = image(turns)
    assert both == image([{"role": "user", "content": "a red barn at night"}])
    assert both != image(turns[1:])
    for role in ("system", "developer"):  # dropped by vLLM-Omni too: accepted and reported
        body = {"model": "qwen", "messages": [{"role": role, "content": "be nice"}, *turns]}
        response = http.post(CHAT, json={**body, **knobs})
        assert response.status_code == 200, response.text
        assert response.headers["x-omni-ignored-fields"] == "messages[0]"
        assert response.json()["choices"][0]["message"]["content"][0]["image_url"]["url"] == both
    for role in ("assistant", "tool"):
        body = {"model": "qwen", "messages": [{"role": role, "content": "be nice"}, *turns]}
        error = error_of(http.post(CHAT, json=body), 400, "messages[0]")
        assert role in error["message"]


def test_chat_refuses_non_image_models_and_foreign_urls(live_server, http) -> None:
    live_server.need("qwen")
    for other in ("tts", "wan"):
        if live_server.has(other):
            body = {"model": other, "messages": [{"role": "user", "content": "hello"}]}
            error_of(http.post(CHAT, json=body), 400, "model")
    part = {"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}
    body = {"model": "qwen", "messages": [{"role": "user", "content": [part]}]}
    body["messages"][0]["content"].insert(0, {"type": "text", "text": "edit"})
    error = error_of(http.post(CHAT, json=body), 400)
    assert error["code"] == "url_fetch_disabled"


@pytest.mark.parametrize(("task", "model"), [("chat-t2i", "qwen"), ("chat-i2i", "qwen-edit")])
def test_bench_serve_drives_chat(live_server, task, model) -> None:
    import asyncio

    from omni_core.bench.serve import BenchConfig, BenchRunner

    live_server.need(model)
    config = BenchConfig(
        base_url=live_server.url,
        task=task,
        num_prompts=3,
        max_concurrency=2,
        warmup_requests=0,
        model=model,
        api_key=live_server.api_key,
        size="32x32",
        steps=2,
    )
    summary = asyncio.run(BenchRunner(config).run())
    assert summary["completed"] == 3 and summary["failed"] == 0, summary
