"""``/v1/realtime`` through the official ``openai`` client's realtime connection, against a
real server (uvicorn on 127.0.0.1, started once for the module) of tiny Qwen2.5-Omni and
Qwen3-Omni and an acme model that reads no audio: text and audio turns answered with speech and
its transcript, server VAD (the real Silero, fed a voiced signal) answering by itself, barge-in,
a second turn that sees the first, bad events, a disconnect, two sessions at once."""

from __future__ import annotations

import asyncio
import base64
import functools
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import OMNI_MODELS, Checkpoints, _build, server_config, start_server
from .voiced import pcm16, silence, voiced

TOKENS = 8


@pytest.fixture(scope="module")
def server(acme_chat: Any, with_chat_plugin: Any, tmp_path_factory: Any) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("rt-ckpts")
    ckpts = Checkpoints(paths={"deaf": acme_chat.build_tiny_chat(root / "deaf", hears=False)})
    state_dir = tmp_path_factory.mktemp("rt-state")
    with with_chat_plugin():
        for family in OMNI_MODELS:
            _build(ckpts, family, root, "omni_qwen.testing", f"build_tiny_{family}_omni")
        config = server_config(ckpts, state_dir, realtime_max_sessions=2)
        live = start_server(config, ckpts, state_dir)
    yield live
    live.stop()


def _client(server: Any) -> Any:
    import openai

    return openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=server.api_key, max_retries=0)


@functools.cache
def _server_events() -> Any:
    from openai.types.realtime.realtime_server_event import RealtimeServerEvent
    from pydantic import TypeAdapter

    return TypeAdapter(RealtimeServerEvent)


async def _until(conn: Any, kind: str, timeout: float = 120) -> list[Any]:
    """Events up to and including the first of ``kind``, each validated against the SDK's own
    event models (the client itself only constructs them, unchecked)."""
    events = []
    while True:
        raw = await asyncio.wait_for(conn.recv_bytes(), timeout)
        event = _server_events().validate_json(raw)
        events.append(event)
        if event.type == kind:
            return events


def _of(events: list[Any], kind: str) -> list[Any]:
    return [e for e in events if e.type == kind]


def _audio(events: list[Any]) -> bytes:
    return b"".join(base64.b64decode(e.delta) for e in _of(events, "response.output_audio.delta"))


async def _text_turn(conn: Any, text: str) -> list[Any]:
    await conn.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )
    await conn.response.create(response={"max_output_tokens": TOKENS})
    return await _until(conn, "response.done")


async def _manual(conn: Any) -> None:
    """A session that commits its audio itself (no server VAD)."""
    await conn.session.update(
        session={"type": "realtime", "temperature": 0, "audio": {"input": {"turn_detection": None}}}
    )
    await _until(conn, "session.updated")


@pytest.mark.parametrize("model", OMNI_MODELS)
def test_a_text_turn_then_an_audio_turn_that_sees_it(server: Any, model: str) -> None:
    server.need(model)

    async def main() -> None:
        async with _client(server).realtime.connect(model=model) as conn:
            created = await _until(conn, "session.created")
            session = created[-1].session
            assert session.model == model and session.output_modalities == ["audio"]
            await _manual(conn)
            first = await _text_turn(conn, "Say something.")
            done = first[-1].response
            assert done.status == "completed" and done.usage.output_tokens <= TOKENS
            transcript = "".join(
                e.delta for e in _of(first, "response.output_audio_transcript.delta")
            )
            assert transcript == _of(first, "response.output_audio_transcript.done")[0].transcript
            assert transcript and len(_audio(first)) > 0  # speech and its transcript
            # an audio turn: PCM16 appended in 100 ms pieces, then committed
            data = pcm16(voiced(0.6))
            for at in range(0, len(data), 4800):
                await conn.input_audio_buffer.append(
                    audio=base64.b64encode(data[at : at + 4800]).decode()
                )
            await conn.input_audio_buffer.commit()
            committed = await _until(conn, "input_audio_buffer.committed")
            await conn.response.create(response={"max_output_tokens": TOKENS})
            second = await _until(conn, "response.done")
            assert second[-1].response.status == "completed"
            assert _of(second, "response.output_audio.delta")
            # the second answer read the first turn, its answer and the audio turn
            state = server.state.models[model]
            # (its prompt holds the first prompt, the first answer and the audio)
            prompt = done.usage.input_tokens + done.usage.output_tokens
            assert second[-1].response.usage.input_tokens > prompt
            assert committed[-1].item_id
            assert state.status == "ready"

    asyncio.run(main())


def test_server_vad_answers_by_itself_and_barge_in_cuts_an_answer(server: Any) -> None:
    model = next(m for m in OMNI_MODELS if server.has(m))

    async def speak(conn: Any, samples: Any) -> None:
        data = pcm16(samples)
        for at in range(0, len(data), 4800):
            await conn.input_audio_buffer.append(
                audio=base64.b64encode(data[at : at + 4800]).decode()
            )

    async def main() -> None:
        async with _client(server).realtime.connect(model=model) as conn:
            await _until(conn, "session.created")
            await conn.session.update(
                session={
                    "type": "realtime",
                    "max_output_tokens": 256,
                    "temperature": 0,
                    "audio": {
                        "input": {
                            "turn_detection": {"type": "server_vad", "silence_duration_ms": 300}
                        }
                    },
                }
            )
            await _until(conn, "session.updated")
            await speak(conn, silence(0.5))
            await speak(conn, voiced(1.0))
            started = await _until(conn, "input_audio_buffer.speech_started")
            # the voice starts at 500 ms; audio_start_ms is prefix_padding_ms (300) before
            assert 100 <= started[-1].audio_start_ms <= 400
            await speak(conn, silence(0.6))  # the end of speech: committed and answered
            events = await _until(conn, "response.output_audio.delta")
            stopped = _of(events, "input_audio_buffer.speech_stopped")[0]
            assert stopped.audio_end_ms > started[-1].audio_start_ms
            committed = _of(events, "input_audio_buffer.committed")[0]
            assert committed.item_id == started[-1].item_id
            # the committed turn is the audio from audio_start_ms to the end of the silence
            await conn.send({"type": "conversation.item.retrieve", "item_id": committed.item_id})
            heard = (await _until(conn, "conversation.item.retrieved"))[-1].item
            ms = len(base64.b64decode(heard.content[0].audio)) // 48
            spoken = stopped.audio_end_ms - started[-1].audio_start_ms
            assert spoken + 300 <= ms <= spoken + 300 + 200  # + silence_duration_ms (+ a piece)
            # barge-in: speech while the answer is being spoken cancels it
            await speak(conn, voiced(0.5, seed=2))
            events = await _until(conn, "response.done")
            assert _of(events, "input_audio_buffer.speech_started")
            done = events[-1].response
            assert done.status == "cancelled" and done.status_details.reason == "turn_detected"
            assert done.output[0].status == "incomplete"  # kept, as truncated
            assert _of(events, "conversation.item.truncated")[0].item_id == done.output[0].id

    asyncio.run(main())


def test_bad_events_get_error_events_and_the_session_goes_on(server: Any) -> None:
    model = next(m for m in OMNI_MODELS if server.has(m))

    async def main() -> None:
        async with _client(server).realtime.connect(model=model) as conn:
            await _until(conn, "session.created")
            await _manual(conn)
            bad = [
                {"type": "no.such.event", "event_id": "e1"},
                {"type": "input_audio_buffer.append", "audio": "%%%"},
                {"type": "input_audio_buffer.append", "audio": base64.b64encode(b"odd").decode()},
                {"type": "session.update", "session": {"audio": {"output": {"voice": "nobody"}}}},
                {"type": "input_audio_buffer.commit"},  # empty buffer
                {"type": "response.cancel"},  # nothing to cancel
                {"type": "session.update", "session": {"output_modalities": ["video"]}},
            ]
            codes = []
            for event in bad:
                await conn.send(event)
                error = (await _until(conn, "error"))[-1].error
                codes.append(error.code)
                assert error.message and error.type == "invalid_request_error"
            assert codes == [
                "invalid_event",
                "invalid_value",
                "invalid_value",
                "invalid_value",
                "input_audio_buffer_commit_empty",
                "response_cancel_not_active",
                "invalid_value",
            ]
            assert error.param == "session.output_modalities"
            await conn.send({"type": "no.such.event", "event_id": "mine"})
            assert (await _until(conn, "error"))[-1].error.event_id == "mine"
            events = await _text_turn(conn, "Still there?")  # the session goes on
            assert events[-1].response.status == "completed"

    asyncio.run(main())


def test_a_model_that_cannot_hear_names_itself(server: Any) -> None:
    async def main() -> None:
        async with _client(server).realtime.connect(model="deaf") as conn:
            session = (await _until(conn, "session.created"))[-1].session
            assert session.output_modalities == ["text"]
            await conn.input_audio_buffer.append(audio=base64.b64encode(b"\0" * 4800).decode())
            error = (await _until(conn, "error"))[-1].error
            assert error.code == "unsupported_input_modality" and "'deaf'" in error.message
            events = await _text_turn(conn, "Hello")
            text = "".join(e.delta for e in _of(events, "response.output_text.delta"))
            assert text == _of(events, "response.output_text.done")[0].text
            assert events[-1].response.status == "completed"

    asyncio.run(main())


def test_two_sessions_answer_at_once_and_a_disconnect_frees_the_slot(server: Any) -> None:
    model = next(m for m in OMNI_MODELS if server.has(m))
    client = _client(server)

    async def one(text: str) -> list[Any]:
        async with client.realtime.connect(model=model) as conn:
            await _until(conn, "session.created")
            await _manual(conn)
            return await _text_turn(conn, text)

    async def main() -> None:
        first, second = await asyncio.gather(one("Hello there."), one("Good morning!"))
        for events in (first, second):
            assert events[-1].response.status == "completed"
        assert first[-1].response.id != second[-1].response.id
        # two sessions are this server's limit: a third waits for one to leave
        async with client.realtime.connect(model=model) as a:
            await _until(a, "session.created")
            async with client.realtime.connect(model=model) as b:
                await _until(b, "session.created")
                await _manual(b)
                async with client.realtime.connect(model=model) as c:
                    assert (await _until(c, "error"))[-1].error.code == "too_many_sessions"
                await b.conversation.item.create(
                    item={"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": "Talk for a while."}]}
                )  # fmt: skip
                await b.response.create(response={"max_output_tokens": 200})
                await _until(b, "response.output_item.added")
            # b left mid-answer: its session and its engine slot are free
            engine = server.state.models[model].engine
            for _ in range(200):
                if not engine.running_count:
                    break
                await asyncio.sleep(0.05)
            assert not engine.running_count
            async with client.realtime.connect(model=model) as d:
                assert (await _until(d, "session.created"))[-1].session.model == model

    asyncio.run(main())


def test_the_upgrade_needs_the_key_and_a_local_origin(server: Any) -> None:
    import openai

    async def main() -> None:
        wrong = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0)
        async with wrong.realtime.connect(model="deaf") as conn:
            assert (await _until(conn, "error"))[-1].error.code == "invalid_api_key"
        foreign = {"Origin": "http://evil.example"}
        async with _client(server).realtime.connect(model="deaf", extra_headers=foreign) as conn:
            assert (await _until(conn, "error"))[-1].error.code == "cross_origin_request"

    asyncio.run(main())
    # DNS rebinding: a page's own host name pointed at loopback (clients cannot replace Host,
    # so the handshake is written by hand)
    assert _first_event(server, "evil.example")["error"]["code"] == "invalid_host"


def _first_event(server: Any, host: str) -> dict[str, Any]:
    """The first server event of a WebSocket handshake sent with ``Host: host``."""
    import json
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(server.url)
    with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
        sock.sendall(
            f"GET /v1/realtime?model=deaf HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {server.api_key}\r\n\r\n".encode()
        )
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(4096)
        head, _, data = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101")
        while len(data) < 4:
            data += sock.recv(4096)
        size, start = data[1] & 0x7F, 2
        if size == 126:
            size, start = int.from_bytes(data[2:4], "big"), 4
        while len(data) < start + size:
            data += sock.recv(4096)
        return json.loads(data[start : start + size])


@pytest.mark.parametrize("vad", [False, True], ids=["commit", "server-vad"])
def test_bench_serve_realtime_reports_first_audio_and_rtf(
    server: Any, tmp_path: Any, vad: bool
) -> None:
    import json

    from click.testing import CliRunner

    from omni_core.commands.bench import bench_serve

    model = next(m for m in OMNI_MODELS if server.has(m))
    out = tmp_path / "rt.json"
    args = ["--base-url", server.url, "--task", "realtime", "--model", model]
    args += ["--api-key", server.api_key, "--num-prompts", "2", "--max-concurrency", "2"]
    extra = {"max_output_tokens": 6, "temperature": 0}
    extra.update({"turn_detection": "server_vad"} if vad else {})
    args += ["--warmup-requests", "0", "--extra", json.dumps(extra), "--output", str(out)]
    result = CliRunner().invoke(bench_serve, args)
    assert result.exit_code == 0, result.output
    assert "first audio" in result.output and "real-time factor" in result.output
    summary = json.loads(out.read_text())
    assert summary["completed"] == 2 and summary["failed"] == 0
    assert summary["ttfb_ms"]["p50"] > 0 and summary["real_time_factor"]["mean"] > 0
    for record in summary["requests"]:
        assert 0 < record["ttfb_s"] <= record["latency_s"] and record["audio_s"] > 0


@pytest.mark.parametrize(
    ("limit", "value", "code"),
    [
        ("realtime_idle_s", 0.5, "idle_timeout"),
        ("realtime_max_s", 1.0, "session_expired"),
        ("realtime_max_audio_bytes", 9600, "session_audio_limit"),
        ("realtime_max_turns", 1, "session_turn_limit"),
    ],
)
def test_a_session_limit_ends_the_session(server: Any, limit: str, value: Any, code: str) -> None:
    import websockets

    config = server.state.config
    before = getattr(config, limit)

    async def main() -> None:
        async with _client(server).realtime.connect(model="qwen25") as conn:
            await _until(conn, "session.created")
            await _manual(conn)
            if limit == "realtime_max_audio_bytes":
                await conn.input_audio_buffer.append(audio=base64.b64encode(b"\0" * 12000).decode())
            elif limit == "realtime_max_turns":
                for text in ("one", "two"):
                    await conn.conversation.item.create(
                        item={"type": "message", "role": "user",
                              "content": [{"type": "input_text", "text": text}]}
                    )  # fmt: skip
            errors = _of(await _until(conn, "error", timeout=30), "error")
            assert errors[-1].error.code == code
            with pytest.raises(websockets.ConnectionClosed):  # and the socket closes
                await asyncio.wait_for(conn.recv(), 10)

    server.need("qwen25")
    setattr(config, limit, value)
    try:
        asyncio.run(main())
    finally:
        setattr(config, limit, before)


def test_response_cancel_keeps_the_partial_answer_for_the_next_turn(server: Any) -> None:
    model = next(m for m in OMNI_MODELS if server.has(m))

    async def main() -> None:
        async with _client(server).realtime.connect(model=model) as conn:
            await _until(conn, "session.created")
            await _manual(conn)
            await conn.conversation.item.create(
                item={"type": "message", "role": "user",
                      "content": [{"type": "input_text", "text": "Tell me a long story."}]}
            )  # fmt: skip
            await conn.response.create(response={"max_output_tokens": 256})
            await _until(conn, "response.output_audio_transcript.delta")
            await conn.response.cancel()
            events = await _until(conn, "response.done")
            done = events[-1].response
            assert done.status == "cancelled" and done.status_details.reason == "client_cancelled"
            partial = done.output[0]
            assert partial.status == "incomplete" and partial.content[0].transcript
            retrieved = await conn.send(
                {"type": "conversation.item.retrieve", "item_id": partial.id}
            )
            assert retrieved is None
            item = (await _until(conn, "conversation.item.retrieved"))[-1].item
            assert item.content[0].transcript == partial.content[0].transcript
            follow = await _text_turn(conn, "And then?")
            assert follow[-1].response.status == "completed"

    asyncio.run(main())
