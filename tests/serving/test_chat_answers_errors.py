"""``/v1/chat/completions`` for chat models: what is refused, and how. Every bad body is a 400
with an OpenAI-style error naming the field (streamed or not, never a 5xx); fields that cannot
change the answer are accepted and reported in ``X-Omni-Ignored-Fields``; inputs are bounded;
a client that leaves a stream cancels its answer. The server is the ``chat_server`` fixture.
"""

from __future__ import annotations

import base64

import pytest

from .chat_files import data_url, error_of, mp4_bytes, png_bytes

CHAT = "/v1/chat/completions"
SPOKEN = {"modalities": ["text", "audio"]}


def test_accepted_fields_are_reported(chat_server, chat_http) -> None:
    body = {
        "model": "acme-text",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "tool_choice": "none",
        "user": "u1",
        "metadata": {"k": "v"},
        "store": False,
        "presence_penalty": 0,
        "n": 1,
        "top_k": -1,
        "stream": None,
        "extra_body": {"temperature": 0},
        "audio": {"voice": "ada"},
    }
    body["messages"][0]["name"] = "ann"  # a participant name: no chat template reads it
    response = chat_http.post(CHAT, json=body)
    assert response.status_code == 200, response.text
    ignored = set(response.headers["x-omni-ignored-fields"].split(", "))
    reported = {"tool_choice", "user", "metadata", "store", "presence_penalty", "n", "audio"}
    assert reported | {"messages[0].name"} == ignored


AT = "messages[0].content[0]"
PNG = png_bytes((8, 8))


def _parts(*parts: dict, role: str = "user") -> dict:
    """A body change: the first message holds ``parts`` (then a user turn, if it is not one)."""
    turns = [{"role": role, "content": list(parts)}]
    return {"messages": turns + ([{"role": "user", "content": "x"}] if role != "user" else [])}


def _audio(data: str, fmt: str = "wav") -> dict:
    return _parts({"type": "input_audio", "input_audio": {"data": data, "format": fmt}})


def _url(kind: str, url: str) -> dict:
    return {"type": f"{kind}_url", f"{kind}_url": {"url": url}}


@pytest.mark.parametrize(
    ("model", "change", "param"),
    [
        ("acme-text", SPOKEN, "modalities"),
        ("acme-omni", {**SPOKEN, "audio": {"voice": "zoe"}}, "audio.voice"),
        ("acme-omni", {**SPOKEN, "audio": {"voice": "ada", "format": "opus"}}, "audio.format"),
        ("acme-omni", {"audio": {"voice": "ada", "speed": 2}}, "audio.speed"),
        ("acme-text", {"modalities": ["image"]}, "modalities.0"),
        ("acme-text", {"messages": []}, "messages"),
        ("acme-text", {"messages": [{"role": "assistant", "content": "hi"}]}, "messages"),
        ("acme-text", {"messages": [{"role": "tool", "content": "x"}]}, "messages[0]"),
        ("acme-text", {"messages": [{"role": "robot", "content": "x"}]}, "messages[0]"),
        ("acme-text", {"messages": [{"role": "user"}]}, "messages[0]"),
        ("acme-text", _parts({"type": "file"}), "messages[0].content[0]"),
        ("acme-text", _audio("AAAA", "midi"), "messages[0].content[0]"),
        ("acme-text", _audio(base64.b64encode(b"no audio" * 50).decode()), f"{AT}.input_audio"),
        ("acme-text", _audio("%%%"), f"{AT}.input_audio"),
        ("acme-text", _parts(_url("video", data_url(PNG, "video/mp4"))), f"{AT}.video_url"),
        ("acme-text", _parts(_url("image", "http://example.com/a.png")), f"{AT}.image_url"),
        ("acme-text", _parts(_url("image", data_url(PNG, "image/png")), role="system"), AT),
        (
            "acme-text",
            _parts({"type": "image_url", "image_url": {"url": "x", "y": 1}}),
            f"{AT}.image_url.y",
        ),
        (
            "acme-text",
            _parts({"type": "video_url", "video_url": {"url": "x", "num_frames": 0}}),
            f"{AT}.video_url.num_frames",
        ),
        (
            "acme-text",
            {"extra_body": {"sampling_params_list": [{"temperature": 0}]}},
            "sampling_params_list",
        ),
        (
            "acme-text",
            {"messages": [{"role": "user", "content": "x", "audio": {}}]},
            "messages[0].audio",
        ),
        (
            "acme-text",
            {"messages": [{"role": "user", "content": "x", "weight": 1}]},
            "messages[0].weight",
        ),
        (
            "acme-text",
            {
                "messages": [
                    {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]},
                    {"role": "user", "content": "x"},
                ]
            },
            "messages[0].tool_calls",
        ),
        (
            "acme-text",
            {"messages": [{"role": "assistant", "content": ""}, {"role": "user", "content": "x"}]},
            "messages[0]",
        ),
        ("acme-text", {"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ("acme-text", {"stop": ["\n"]}, "stop"),
        ("acme-text", {"logprobs": True}, "logprobs"),
        ("acme-text", {"n": 2}, "n"),
        ("acme-text", {"presence_penalty": 0.5}, "presence_penalty"),
        ("acme-text", {"repetition_penalty": 1.3}, "repetition_penalty"),
        ("acme-text", {"response_format": {"type": "json_object"}}, "response_format"),
        ("acme-text", {"max_tokens": 5, "max_completion_tokens": 6}, "max_completion_tokens"),
        ("acme-text", {"max_tokens": 0}, "max_tokens"),
        ("acme-text", {"temperature": 3}, "temperature"),
        ("acme-text", {"top_p": 0}, "top_p"),
        ("acme-text", {"min_p": 0.1}, "min_p"),
        ("acme-text", {"seed": -1}, "seed"),
    ],
)
def test_invalid_chat_requests(chat_server, chat_http, model, change, param) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], **change}
    for stream in (False, True):
        error_of(chat_http.post(CHAT, json={**body, "stream": stream}), 400, param)


def test_disallowed_url_hosts_and_bounded_inputs(chat_server, chat_http) -> None:
    part = {"type": "audio_url", "audio_url": {"url": "https://example.com/a.wav"}}
    body = {"model": "acme-text", "messages": [{"role": "user", "content": [part]}]}
    assert error_of(chat_http.post(CHAT, json=body), 400)["code"] == "url_fetch_disabled"
    clips = [
        {
            "type": "video_url",
            "video_url": {"url": data_url(mp4_bytes(2, (16, 16), 4), "video/mp4")},
        }
    ]
    body["messages"][0]["content"] = clips * 5
    error_of(chat_http.post(CHAT, json=body), 400, "messages")
    # an audio part above --max-upload-mb (1 MB here): 413 naming the limit, and not an image
    huge = base64.b64encode(b"RIFF" + bytes(1_100_000)).decode()
    error = error_of(chat_http.post(CHAT, json={**body, **_audio(huge)}), 413)
    assert error["code"] == "file_too_large" and "--max-upload-mb" in error["message"], error
    assert "image" not in error["message"]
    big = data_url(mp4_bytes(20, (2048, 2048), 10), "video/mp4")  # 20 frames of 4 Mpx: 12 are kept
    body["messages"][0]["content"] = [{"type": "video_url", "video_url": {"url": big}}]
    response = chat_http.post(CHAT, json={**body, "max_tokens": 2})
    assert response.status_code == 200, response.text
    assert "20 frames -> 12 at 6 fps" in response.headers["x-omni-adjusted-fields"]


def test_a_stream_the_client_leaves_is_cancelled(chat_server, chat_http, wait_for) -> None:
    body = {
        "model": "acme-omni",
        "messages": [{"role": "user", "content": "go on"}],
        "max_tokens": 400,
        "stream": True,
        **SPOKEN,
    }
    engine = chat_server.state.models["acme-omni"].engine
    with chat_http.stream("POST", CHAT, json=body) as response:
        assert response.status_code == 200
        next(response.iter_lines())
    wait_for(lambda: engine.running_count == 0, timeout=30)
    runtime = chat_server.state.models["acme-omni"].pipeline.shared_runtime()
    wait_for(lambda: runtime.open_streams == 0, timeout=30)
