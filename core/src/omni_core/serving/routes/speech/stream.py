"""``WS /v1/audio/speech/stream``: text in as it is written, speech out sentence by sentence
(vLLM-Omni's protocol), for an LLM whose answer is spoken while it is still being written.

The client sends ``{"type": "session.config", "model", "voice", "response_format", ...}`` (any
field of ``POST /v1/audio/speech`` but ``input``, plus ``split_granularity``: ``sentence``, the
default, ``clause`` or ``none``), then ``{"type": "input.text", "text"}`` pieces, then
``{"type": "input.done"}``. The server splits sentences as text arrives (:class:`Splitter`) and
speaks them in order, each as ``{"type": "audio.start", "sentence_index", "sentence_text",
"format", "sample_rate"}``, binary audio frames as the engine makes them, ``{"type":
"audio.done", "sentence_index", "total_bytes"}``; at the end ``{"type": "session.done",
"total_sentences"}`` and the socket closes. Problems are ``{"type": "error", "message", "code",
"param"}`` events: a bad config, a bad key, oversized messages, the idle and total limits close
the session; a sentence that fails is reported and the next one is spoken. A client that leaves
cancels its running sentence at the next step (its engine slot is free).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import uuid
from typing import Any

from fastapi import FastAPI, WebSocket, WebSocketDisconnect

from omni_core.contract.types import AudioChunk
from omni_core.serving import media
from omni_core.serving.errors import APIError, from_exception
from omni_core.serving.guards import bearer_ok, websocket_refusal
from omni_core.serving.http import check_text, submit_streaming
from omni_core.serving.routes.speech.speech import speech_call
from omni_core.serving.state import ServerState
from omni_core.speech.pipeline import SpeechPipeline

log = logging.getLogger("omni.serving")

PATH = "/v1/audio/speech/stream"
#: Characters waiting for a sentence end at most (then the session ends with an error).
MAX_BUFFER_CHARS = 100_000
#: A sentence longer than this (the speech body's ``input`` limit) is cut at a space.
MAX_SENTENCE_CHARS = 4096
#: Room kept in a sentence for a carried speaker label (a longer label is not carried).
MAX_LABEL_CHARS = 64
#: Bytes of one ``input.text`` (or ``input.done``) message; ``session.config`` may carry a
#: reference voice and gets the server's body limit.
MAX_TEXT_MESSAGE_BYTES = 64 * 1024
#: Seconds to wait for ``session.config`` once connected.
CONFIG_TIMEOUT_S = 10.0
#: Fields of ``session.config`` that are the session's, not the speech body's.
SESSION_FIELDS = ("type", "split_granularity", "stream_audio")

#: Sentence ends: ``.!?`` and a space (the end of the text is not one: ``input.done`` is), or
#: a CJK full stop, question or exclamation mark; ``clause`` adds CJK commas and semicolons.
_BOUNDARIES = {
    "sentence": re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f])"),
    "clause": re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f\uff0c\uff1b])"),
}


class SessionError(Exception):
    """Ends the session with an error event (``code``: its machine-readable name)."""

    def __init__(self, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.param = code, param


class Splitter:
    """Sentences out of text that arrives in pieces: each boundary of ``granularity`` ends one
    (a piece shorter than ``min_chars``, "Dr.", waits for the next); ``flush`` gives the rest.

    ``label`` is a multi-speaker model's script label (``SpeechPipeline.script_label``): a
    sentence that opens without one is opened with the label in effect (the last one that
    opened a line), so "Speaker 1: Hi. How are you?" is spoken as "Speaker 1: Hi." and
    "Speaker 1: How are you?", each by speaker 1, as the whole script is over HTTP."""

    def __init__(
        self, granularity: str = "sentence", min_chars: int = 2, label: str | None = None
    ) -> None:
        if granularity not in (*_BOUNDARIES, "none"):
            raise SessionError(
                f"split_granularity: expected sentence, clause or none, got {granularity!r}",
                "invalid_value",
                "split_granularity",
            )
        self.boundary = _BOUNDARIES.get(granularity)
        self.min_chars = min_chars
        self.buffer = ""
        #: Characters of a sentence at most (room left for a carried label).
        self.max_chars = MAX_SENTENCE_CHARS - (0 if label is None else MAX_LABEL_CHARS)
        #: A label that opens a line; the label in effect (its text as written).
        self.label = None if label is None else re.compile(rf"^\s*(?:{label})", re.I | re.M)
        self.speaker: str | None = None

    def _labelled(self, sentences: list[str]) -> list[str]:
        if self.label is None:
            return sentences
        out = []
        for sentence in sentences:
            if self.speaker is not None and self.label.match(sentence) is None:
                sentence = f"{self.speaker} {sentence}"
            opened = list(self.label.finditer(sentence))
            if opened and len(opened[-1].group(0).strip()) < MAX_LABEL_CHARS:
                self.speaker = opened[-1].group(0).strip()
            out.append(sentence)
        return out

    def feed(self, text: str) -> list[str]:
        self.buffer += text
        if len(self.buffer) > MAX_BUFFER_CHARS:
            raise SessionError(
                f"more than {MAX_BUFFER_CHARS} characters without a sentence end",
                "buffer_too_large",
                "text",
            )
        out: list[str] = []
        if self.boundary is not None:
            parts = self.boundary.split(self.buffer)
            carry = ""
            for part in parts[:-1]:
                piece, carry = carry + part, ""
                if len(piece.strip()) >= self.min_chars:
                    out.append(piece.strip())
                elif piece.strip():
                    carry = piece + " "
            self.buffer = carry + parts[-1]
        while len(self.buffer) > self.max_chars:  # no end in sight: cut at a space
            at = self.buffer.rfind(" ", 0, self.max_chars)
            at = at if at > 0 else self.max_chars
            out.append(self.buffer[:at].strip())
            self.buffer = self.buffer[at:].lstrip()
        pieces = [piece for sentence in out for piece in _cut(sentence, self.max_chars)]
        return self._labelled(pieces)

    def flush(self) -> list[str]:
        rest, self.buffer = self.buffer.strip(), ""
        return self._labelled(_cut(rest, self.max_chars) if rest else [])


def _cut(text: str, limit: int = MAX_SENTENCE_CHARS) -> list[str]:
    """Pieces of at most ``limit`` characters, cut at a space where there is one."""
    pieces = []
    while len(text) > limit:
        at = text.rfind(" ", 0, limit)
        at = at if at > 0 else limit
        pieces.append(text[:at].strip())
        text = text[at:].lstrip()
    return [*pieces, text] if text else pieces


class Session:
    """One connection: the reader (messages -> sentences) and the speaker (sentences -> audio)
    run side by side, so text keeps arriving while a sentence is spoken and a disconnect is seen
    at once."""

    def __init__(self, state: ServerState, websocket: WebSocket) -> None:
        self.state, self.ws = state, websocket
        self.sentences: asyncio.Queue[str | None] = asyncio.Queue()
        self.config: dict[str, Any] = {}
        self.splitter = Splitter()
        self.spoken = 0

    async def send_error(self, message: str, code: str, param: str | None = None) -> None:
        event = {"type": "error", "message": message, "code": code, "param": param}
        with contextlib.suppress(Exception):  # the client may be gone already
            await self.ws.send_text(json.dumps(event))

    async def _receive(self, timeout: float) -> dict[str, Any]:
        try:
            message = await asyncio.wait_for(self.ws.receive(), timeout)
        except TimeoutError:
            raise SessionError(
                f"no message for {timeout:g} s (the idle limit)", "idle_timeout"
            ) from None
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        raw = message.get("text")
        if raw is None:
            raise SessionError("send JSON text messages, not binary ones", "invalid_message")
        limit = self.state.config.max_body_bytes if not self.config else MAX_TEXT_MESSAGE_BYTES
        if len(raw) > limit:  # characters <= bytes: a cheap first bound
            raise SessionError(f"a message of more than {limit} bytes", "message_too_large")
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SessionError(f"malformed JSON message: {exc}", "invalid_json") from None
        if not isinstance(data, dict) or not isinstance(data.get("type"), str):
            raise SessionError('each message is a JSON object with a "type"', "invalid_message")
        try:
            check_text(data)
        except APIError as exc:
            raise SessionError(exc.message, exc.code or "invalid_message", exc.param) from None
        return data

    async def configure(self) -> None:
        data = await self._receive(CONFIG_TIMEOUT_S)
        if data["type"] != "session.config":
            raise SessionError(
                f"expected session.config first, got {data['type']!r}", "invalid_message", "type"
            )
        granularity = str(data.get("split_granularity", "sentence"))
        self.splitter = Splitter(granularity)
        self.config = {k: v for k, v in data.items() if k not in SESSION_FIELDS}
        if "input" in self.config:
            raise SessionError(
                "input: send the text as input.text messages", "invalid_value", "input"
            )
        self.config.setdefault("response_format", "pcm")
        try:  # the whole body is checked now, not at the first sentence
            body = {**self.config, "input": "Hello."}
            call = await speech_call(self.state, body, None, "check", piece=True)
        except APIError as exc:
            raise SessionError(exc.message, exc.code or "invalid_request", exc.param) from None
        pipeline = call.served.pipeline
        if isinstance(pipeline, SpeechPipeline) and pipeline.max_speakers > 1:
            self.splitter = Splitter(granularity, label=pipeline.script_label)

    async def read(self) -> None:
        """Messages -> sentences on the queue (None after ``input.done``), then the socket is
        only watched for the client leaving."""
        idle = self.state.config.stream_idle_s
        while True:
            data = await self._receive(idle)
            kind = data["type"]
            if kind == "input.text":
                text = data.get("text")
                if not isinstance(text, str):
                    raise SessionError("input.text: text must be a string", "invalid_value", "text")
                for sentence in self.splitter.feed(text):
                    self.sentences.put_nowait(sentence)
            elif kind == "input.done":
                for sentence in self.splitter.flush():
                    self.sentences.put_nowait(sentence)
                self.sentences.put_nowait(None)
                break
            else:
                raise SessionError(f"unknown message type {kind!r}", "invalid_message", "type")
        while True:  # nothing more is expected; a disconnect raises here
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(message.get("code", 1000))

    async def speak(self) -> None:
        """Each sentence in order: audio.start, binary frames as they are made, audio.done."""
        while (sentence := await self.sentences.get()) is not None:
            index = self.spoken
            self.spoken += 1
            await self.speak_one(index, sentence)
        done = {"type": "session.done", "total_sentences": self.spoken}
        await self.ws.send_text(json.dumps(done))

    async def speak_one(self, index: int, sentence: str) -> None:
        rid = uuid.uuid4().hex
        total, failed = 0, False
        try:
            body = {**self.config, "input": sentence}
            call = await speech_call(self.state, body, None, rid, piece=True)
            job, queue, item = await submit_streaming(self.state, call.served, call.request)
        except APIError as exc:
            await self.send_error(f"sentence {index}: {exc.message}", exc.code or "", exc.param)
            await self._done(index, 0, failed=True)
            return
        engine = call.served.engine
        try:
            if not isinstance(item, AudioChunk) and item.exception() is not None:
                raise item.exception()
            rate = item.sample_rate if isinstance(item, AudioChunk) else 0
            rate = rate or int(item.result().sample_rate or 0)
            encoder, _ = media.stream_encoder(call.format, rate)
            start = {
                "type": "audio.start",
                "sentence_index": index,
                "sentence_text": sentence,
                "format": call.format,
                "sample_rate": rate,
            }
            await self.ws.send_text(json.dumps(start))
            while isinstance(item, AudioChunk):
                data = encoder.encode(item.samples)
                if data:
                    total += len(data)
                    await self.ws.send_bytes(data)
                item = await queue.get()
            if item.exception() is not None:
                raise item.exception()
            tail = encoder.close()
            if tail:
                total += len(tail)
                await self.ws.send_bytes(tail)
        except (WebSocketDisconnect, asyncio.CancelledError):
            raise
        except Exception as exc:  # noqa: BLE001 - this sentence fails, the next is spoken
            failed = True
            api = from_exception(exc)
            await self.send_error(f"sentence {index}: {api.message}", api.code or "", api.param)
        finally:
            if engine is not None and not job.future.done():
                engine.cancel(job, "the client disconnected")
        await self._done(index, total, failed=failed)

    async def _done(self, index: int, total: int, *, failed: bool) -> None:
        event = {"type": "audio.done", "sentence_index": index, "total_bytes": total}
        await self.ws.send_text(json.dumps({**event, "error": failed}))


def add_websocket(app: FastAPI, state: ServerState) -> None:
    """The WebSocket route (on the app: the ``/v1`` router's key check reads HTTP headers only;
    this one checks the same key itself and answers with an error event)."""

    @app.websocket(PATH)
    async def speech_stream(websocket: WebSocket) -> None:
        refusal = websocket_refusal(websocket.scope, state.config)
        await websocket.accept()
        session = Session(state, websocket)
        reader: asyncio.Task[None] | None = None
        speaker: asyncio.Task[None] | None = None
        try:
            if refusal is not None:
                raise SessionError(refusal.message, refusal.code or "forbidden", refusal.param)
            if not bearer_ok(websocket.headers, state.config):
                raise SessionError(
                    "missing or invalid API key: send 'Authorization: Bearer KEY'",
                    "invalid_api_key",
                )
            await session.configure()
            reader = asyncio.ensure_future(session.read())
            speaker = asyncio.ensure_future(session.speak())
            done, _ = await asyncio.wait(
                {reader, speaker},
                timeout=state.config.stream_max_s,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not done:
                raise SessionError(
                    f"the session ran past {state.config.stream_max_s:g} s (the total limit)",
                    "session_timeout",
                )
            if reader in done:
                reader.result()  # raises what ended the reader: an error or the client leaving
            speaker.result()
            await websocket.close(1000)
        except SessionError as exc:
            await session.send_error(str(exc), exc.code, exc.param)
            with contextlib.suppress(Exception):
                await websocket.close(1008 if exc.code == "invalid_api_key" else 1000)
        except WebSocketDisconnect:
            log.info("speech stream: the client disconnected")
        finally:
            for task in (reader, speaker):
                if task is not None and not task.done():
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
