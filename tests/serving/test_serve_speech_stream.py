"""The WebSocket text stream ``/v1/audio/speech/stream`` from a real ``omni serve`` (tiny
Qwen3-TTS in the official layout, 127.0.0.1) with the ``websockets`` client library: text sent in
pieces is spoken sentence by sentence, each sentence's audio equal to ``POST /v1/audio/speech``
of that sentence; the API key, bad configs and oversized messages are error events; the idle
limit closes a session; a client that leaves frees its engine slot.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import httpx
import pytest

pytest.importorskip("omni_qwen.tts")
websockets = pytest.importorskip("websockets")

from .test_serve_qwen_tts import Server  # noqa: E402 - the same omni serve subprocess

KEY = "stream-key"
GREEDY = {"temperature": 0, "max_new_tokens": 8}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from omni_qwen.testing import build_tiny_qwen3_tts

    root = tmp_path_factory.mktemp("stream")
    checkpoints = {"cv": build_tiny_qwen3_tts(root / "cv", "custom_voice")}
    srv = Server(
        checkpoints,
        root / "state",
        root / "serve.log",
        extra=("--api-key", KEY, "--stream-idle-timeout", "3", "--max-batch", "2"),
    )
    yield srv
    srv.stop()


def _url(server: Any) -> str:
    return server.url.replace("http://", "ws://") + "/v1/audio/speech/stream"


async def _session(server: Any, messages: list[dict], *, key: str | None = KEY) -> list[Any]:
    """Send ``messages``, return everything received until the server closes."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    received: list[Any] = []
    async with websockets.connect(_url(server), additional_headers=headers) as ws:
        for message in messages:
            try:
                await ws.send(json.dumps(message))
            except websockets.ConnectionClosed:
                break  # the server ended the session (an error event is waiting)
        try:
            async for item in ws:
                received.append(item if isinstance(item, bytes) else json.loads(item))
        except websockets.ConnectionClosed:
            pass
    return received


def _events(received: list[Any]) -> list[dict]:
    return [r for r in received if isinstance(r, dict)]


CONFIG = {
    "type": "session.config",
    "model": "cv",
    "voice": "serena",
    "response_format": "pcm",
    **GREEDY,
}


def test_text_in_pieces_is_spoken_sentence_by_sentence(server: Any) -> None:
    pieces = ["Hello there", ". How are ", "you today? Fine", " thanks."]
    received = asyncio.run(
        _session(
            server,
            [
                CONFIG,
                *({"type": "input.text", "text": p} for p in pieces),
                {"type": "input.done"},
            ],
        )
    )
    events = _events(received)
    kinds = [e["type"] for e in events]
    assert kinds == ["audio.start", "audio.done"] * 3 + ["session.done"], kinds
    starts = [e for e in events if e["type"] == "audio.start"]
    assert [s["sentence_text"] for s in starts] == [
        "Hello there.",
        "How are you today?",
        "Fine thanks.",
    ]
    assert [s["sentence_index"] for s in starts] == [0, 1, 2]
    assert all(s["format"] == "pcm" and s["sample_rate"] == 24000 for s in starts)
    assert events[-1] == {"type": "session.done", "total_sentences": 3}
    # each sentence's binary frames, in order, equal the HTTP answer for that sentence
    audio: list[bytes] = []
    for item in received:
        if isinstance(item, dict) and item["type"] == "audio.start":
            audio.append(b"")
        elif isinstance(item, bytes):
            audio[-1] += item
    dones = [e for e in events if e["type"] == "audio.done"]
    assert [d["total_bytes"] for d in dones] == [len(a) for a in audio]
    assert not any(d["error"] for d in dones)
    http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"})
    for text, mine in zip([s["sentence_text"] for s in starts], audio, strict=True):
        body = {"model": "cv", "voice": "serena", "input": text, "response_format": "pcm"}
        whole = http.post("/v1/audio/speech", json={**body, **GREEDY}, timeout=120)
        assert whole.status_code == 200 and len(mine) > 1920 * 2
        assert whole.content == mine, text


def test_key_config_and_sizes_are_error_events(server: Any) -> None:
    text = {"type": "input.text", "text": "Hi there."}
    for key in (None, "wrong"):
        events = _events(asyncio.run(_session(server, [CONFIG, text], key=key)))
        assert events[0]["type"] == "error" and events[0]["code"] == "invalid_api_key"
    events = _events(asyncio.run(_session(server, [{**CONFIG, "voice": "nobody"}])))
    assert events[0]["type"] == "error" and events[0]["param"] == "voice", events
    events = _events(asyncio.run(_session(server, [{**CONFIG, "model": "nope"}])))
    assert events[0]["type"] == "error" and events[0]["code"] == "model_not_found", events
    events = _events(asyncio.run(_session(server, [text])))
    assert events[0]["type"] == "error" and "session.config" in events[0]["message"]
    big = {"type": "input.text", "text": "a" * 70_000}
    events = _events(asyncio.run(_session(server, [CONFIG, big])))
    assert events[0]["type"] == "error" and events[0]["code"] == "message_too_large"
    events = _events(asyncio.run(_session(server, [CONFIG, {"type": "input.nope"}])))
    assert events[0]["type"] == "error" and events[0]["param"] == "type"
    events = _events(asyncio.run(_session(server, [{**CONFIG, "split_granularity": "word"}])))
    assert events[0]["param"] == "split_granularity"


def test_idle_limit_closes_the_session(server: Any) -> None:
    t0 = time.monotonic()
    events = _events(asyncio.run(_session(server, [CONFIG])))  # then says nothing
    assert events == [
        {"type": "error", "message": "no message for 3 s (the idle limit)",
         "code": "idle_timeout", "param": None}
    ]  # fmt: skip
    assert 2.5 < time.monotonic() - t0 < 30


def _running(server: Any) -> float:
    metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    found = re.findall(r'^omni_running_requests\{model="cv"\} (\S+)$', metrics, re.M)
    return float(found[0]) if found else 0.0


def test_a_client_that_leaves_frees_its_slot(server: Any) -> None:
    async def leave_after_first_audio() -> None:
        headers = {"Authorization": f"Bearer {KEY}"}
        async with websockets.connect(_url(server), additional_headers=headers) as ws:
            long = {**CONFIG, "max_new_tokens": 2000, "min_new_tokens": 1999}
            await ws.send(json.dumps(long))
            await ws.send(json.dumps({"type": "input.text", "text": "A long one."}))
            await ws.send(json.dumps({"type": "input.done"}))
            async for item in ws:
                if isinstance(item, bytes):
                    break  # audio is coming: leave
        # the socket is closed here, mid-sentence

    asyncio.run(leave_after_first_audio())
    deadline = time.monotonic() + 30
    while _running(server) > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _running(server) == 0  # cancelled at the next step, not 4000 frames later
    events = _events(
        asyncio.run(
            _session(
                server, [CONFIG, {"type": "input.text", "text": "Next."}, {"type": "input.done"}]
            )
        )
    )
    assert events[-1] == {"type": "session.done", "total_sentences": 1}
