"""A streamed answer that does not finish looks unfinished to the client (a real server on
127.0.0.1, the tiny VITS voice and the tiny Qwen2.5-Omni): a raw audio stream is cut (no
terminating chunk: httpx raises ``RemoteProtocolError``), a server-sent-event stream ends with
an ``error`` event (the openai SDK raises ``APIError``), whether the server shut down, an
encoder raised or the pipeline failed; the server logs one line, no ASGI traceback.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from .conftest import Checkpoints, LiveServer, _build, server_config, start_server

TEXT = " ".join(f"Sentence number {i} of a long answer." for i in range(40))


@pytest.fixture(scope="module")
def models(checkpoints: Checkpoints, tmp_path_factory: pytest.TempPathFactory) -> Checkpoints:
    if "tts" not in checkpoints.paths:
        pytest.skip(f"tts: {checkpoints.missing.get('tts')}")
    ckpts = Checkpoints(paths={"tts": checkpoints.paths["tts"]})
    root = tmp_path_factory.mktemp("cut-ckpts")
    _build(ckpts, "qwen25", root, "omni_qwen.testing", "build_tiny_qwen25_omni")
    return ckpts


def _start(models: Checkpoints, state: Path, **overrides: Any) -> LiveServer:
    config = server_config(models, state, api_key=None, **overrides)
    return start_server(config, models, state)


@pytest.fixture(scope="module")
def server(models: Checkpoints, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = _start(models, tmp_path_factory.mktemp("cut-state"))
    yield live
    live.stop()


@pytest.fixture()
def asgi_log() -> Iterator[list[logging.LogRecord]]:
    """What uvicorn logs (its ``uvicorn.error`` logger does not reach the root logger)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(level=logging.ERROR)
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def _speech(live: LiveServer, **extra: Any) -> dict[str, Any]:
    voices = live.state.models["tts"].pipeline.voices()
    return {
        "model": "tts",
        "input": TEXT,
        "voice": voices[0].id if voices else "default",
        "response_format": "pcm",
        **extra,
    }


def _chat(**extra: Any) -> dict[str, Any]:
    return {
        "model": "qwen25",
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "modalities": ["text"],
        "max_tokens": 400,
        "temperature": 0,
        **extra,
    }


def _slow(monkeypatch: pytest.MonkeyPatch, live: LiveServer, fail_after: int | None = None) -> None:
    """The VITS pipeline's chunks come 50 ms apart (so a stream is still running when the test
    acts), and with ``fail_after`` it raises after that many chunks (a pipeline failure)."""
    pipeline = live.state.models["tts"].pipeline
    synthesize = pipeline.synthesize

    def slowly(request: Any) -> Iterator[Any]:
        for i, chunk in enumerate(synthesize(request)):
            if fail_after is not None and i >= fail_after:
                raise RuntimeError("the vocoder broke")
            if i:
                time.sleep(0.05)
            yield chunk

    monkeypatch.setattr(pipeline, "synthesize", slowly)


def _raw_stream_is_cut(live: LiveServer, body: dict[str, Any], act: Any = None) -> bytes:
    """Stream ``body`` raw with httpx; ``act()`` after the first chunk; the body must fail
    with RemoteProtocolError (an incomplete chunked body). Returns what came before."""
    got = b""
    with live.http() as client, client.stream("POST", "/v1/audio/speech", json=body) as response:
        assert response.status_code == 200
        chunks = response.iter_raw()
        got += next(chunks)
        if act is not None:
            act()
        with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
            for chunk in chunks:
                got += chunk
    return got


def _cut_errors() -> tuple[type[BaseException], ...]:
    """What an incomplete body raises in httpx, and in the HTTP client the openai SDK uses
    (httpx2 in openai 3)."""
    errors: list[type[BaseException]] = [httpx.RemoteProtocolError, openai.APIConnectionError]
    try:
        import httpx2

        errors.append(httpx2.RemoteProtocolError)
    except ImportError:  # an openai built on httpx
        pass
    return tuple(errors)


def _sse_events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[len("data: ") :])


def _sse_ends_with_error(live: LiveServer, path: str, body: dict[str, Any], act: Any = None) -> Any:
    """Stream ``body`` as SSE; ``act()`` after the first event; the last event is an error
    and the body ends there (no [DONE]). Returns the error."""
    with live.http() as client, client.stream("POST", path, json=body) as response:
        assert response.status_code == 200
        events = _sse_events(response)
        first = next(events)
        assert "error" not in first
        if act is not None:
            act()
        rest = list(events)  # ends without a protocol error: the stream is closed cleanly
    assert rest and "error" in rest[-1], rest[-3:]
    assert all("error" not in event for event in rest[:-1])
    return rest[-1]["error"]


# -- the pipeline fails mid-stream ----------------------------------------------------------------


def test_serve_a_speech_stream_whose_pipeline_fails_is_cut(server, monkeypatch, asgi_log) -> None:
    _slow(monkeypatch, server, fail_after=3)
    _raw_stream_is_cut(server, _speech(server, stream_format="audio"))
    error = _sse_ends_with_error(server, "/v1/audio/speech", _speech(server, stream_format="sse"))
    assert "vocoder broke" in error["message"]
    # the official client sees the raw stream fail too
    client = server.openai()
    with (
        client.audio.speech.with_streaming_response.create(
            **{k: v for k, v in _speech(server).items() if k != "model"},
            model="tts",
            extra_body={"stream_format": "audio"},
        ) as response,
        pytest.raises(_cut_errors(), match="incomplete chunked read"),
    ):
        b"".join(response.iter_bytes())
    assert not [r for r in asgi_log if "Exception in ASGI application" in r.getMessage()]


def test_serve_a_chat_stream_whose_pipeline_fails_ends_with_an_error(server, monkeypatch) -> None:
    runtime = server.state.models["qwen25"].pipeline.shared_runtime()
    step, calls = runtime.step, [0]

    def failing() -> None:
        calls[0] += 1
        if calls[0] > 4:
            raise RuntimeError("the decoder broke")
        step()

    monkeypatch.setattr(runtime, "step", failing)
    error = _sse_ends_with_error(server, "/v1/chat/completions", _chat(stream=True))
    assert error["type"] == "server_error"
    calls[0] = 0
    with pytest.raises(openai.APIError, match="decoder broke"):
        for _ in server.openai().chat.completions.create(**_chat(), stream=True):
            pass


# -- an encoder raises mid-stream -----------------------------------------------------------------


def test_serve_streams_whose_encoder_fails_are_cut_or_end_with_an_error(
    server, monkeypatch, asgi_log, caplog
) -> None:
    from omni_core.media import audio as codecs

    _slow(monkeypatch, server)
    encode, calls, limit = codecs.StreamEncoder.encode, [0], [4]

    def breaks(self: Any, samples: Any) -> bytes:
        calls[0] += 1
        if calls[0] > limit[0]:
            raise ValueError("the encoder broke")
        return encode(self, samples)

    monkeypatch.setattr(codecs.StreamEncoder, "encode", breaks)
    with caplog.at_level(logging.ERROR, logger="omni.serving"):
        _raw_stream_is_cut(server, _speech(server, stream_format="audio", response_format="mp3"))
    cuts = [r for r in caplog.records if "failed mid-stream" in r.getMessage()]
    assert len(cuts) == 1 and "encoder broke" in cuts[0].getMessage()
    assert not [r for r in asgi_log if "Exception in ASGI application" in r.getMessage()]
    calls[0] = 0
    error = _sse_ends_with_error(server, "/v1/audio/speech", _speech(server, stream_format="sse"))
    assert "encoder broke" in error["message"]
    calls[0], limit[0] = 0, 0  # a spoken chat answer's audio pieces: the same encoder
    with pytest.raises(openai.APIError, match="encoder broke"):
        for _ in server.openai().chat.completions.create(
            **{**_chat(), "modalities": ["text", "audio"], "max_tokens": 40},
            audio={"voice": _voice(server), "format": "pcm16"},
            stream=True,
        ):
            pass


def _voice(live: LiveServer) -> str:
    return live.state.models["qwen25"].pipeline.voices()[-1].id


# -- the server shuts down mid-stream -------------------------------------------------------------


def test_serve_streams_cut_by_shutdown_look_cut(models, tmp_path, monkeypatch, asgi_log) -> None:
    """A drain with no grace period cuts every stream in flight: the raw audio stream ends
    without its last chunk, the SSE streams (speech and chat) end with an error event that
    says the server shut down (503, retry)."""
    live = _start(models, tmp_path, shutdown_grace_s=0)
    try:
        _slow(monkeypatch, live)
        started = {name: threading.Event() for name in ("raw", "sse", "chat")}
        results: dict[str, Any] = {}

        def raw() -> None:
            body = _speech(live, stream_format="audio")
            results["raw"] = _raw_stream_is_cut(live, body, started["raw"].set)

        def speech_sse() -> None:
            body = _speech(live, stream_format="sse")
            results["sse"] = _sse_ends_with_error(
                live, "/v1/audio/speech", body, started["sse"].set
            )

        def chat() -> None:
            body = _chat(stream=True)
            results["chat"] = _sse_ends_with_error(
                live, "/v1/chat/completions", body, started["chat"].set
            )

        def run(target: Any) -> None:
            try:
                target()
            except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                results[f"{target.__name__} raised"] = repr(exc)

        workers = [threading.Thread(target=run, args=(f,)) for f in (raw, speech_sse, chat)]
        for worker in workers:
            worker.start()
        for event in started.values():  # every stream has sent its first piece
            assert event.wait(120)
        threading.Thread(target=live.state.drain, daemon=True).start()
        for worker in workers:
            worker.join(120)
        assert set(results) == {"raw", "sse", "chat"}, results
        for error in (results["sse"], results["chat"]):
            assert "shut down" in error["message"]
            assert error["code"] == "server_shutting_down" and error["type"] == "server_error"
        assert not [r for r in asgi_log if "Exception in ASGI application" in r.getMessage()]
    finally:
        live.stop()
