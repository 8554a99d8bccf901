"""Chat models' answers to ``POST /v1/chat/completions``: text, and speech from omni models, in
OpenAI's shapes (the route is :mod:`omni_core.serving.routes.chat.completions`; it hands chat
models' bodies here).

The body passes :func:`omni_core.serving.compat.translate` (``max_completion_tokens``, sampling
fields omni does not apply, tools, ...), its ``messages`` become
:class:`~omni_core.chat.ChatMessage` objects with decoded media
(:mod:`omni_core.serving.chat_inputs`), and the request runs on the model's engine.

- ``modalities: ["text"]`` (OpenAI's default) answers ``message.content``; ``["text", "audio"]``
  adds ``message.audio`` ``{id, data (base64), transcript, expires_at}`` in ``audio.format``
  (wav unless told: mp3, flac, pcm16) spoken in ``audio.voice``. A model loaded without its
  speech chain (or a text-only one) answers a 400 naming ``modalities``.
- ``stream: true`` sends ``chat.completion.chunk`` events: ``delta.content`` text pieces (with
  ``delta.audio.transcript`` the same piece when audio is asked for), ``delta.audio.data``
  pieces of the encoded audio (pcm16 unless told; concatenated, the pieces are the file), the
  ``finish_reason`` with ``audio.expires_at``, a ``usage`` chunk with
  ``stream_options.include_usage``, then ``[DONE]``.

vLLM-Omni's clients send no ``audio`` object (and often no ``modalities``): such a request to
an omni model is answered with everything the model says (``--chat-modalities model``, the
default; ``text`` keeps OpenAI's text-only default) in vLLM-Omni's shapes: a non-streamed
answer has two choices (both ``index`` 0), the text and then the audio (``message.audio`` with
a base64 WAV); a streamed one labels every chunk with ``"modality": "text"|"audio"`` and an
audio chunk's ``delta.content`` is a base64 WAV file of that piece. A request that sends
``audio: {voice, format}`` gets OpenAI's shapes above.

An assistant turn may name an earlier spoken answer by ``audio.id`` alone (as OpenAI's
multi-turn audio examples do): its transcript is kept for :data:`AUDIO_TTL_S` in the server's
:class:`~omni_core.serving.state.Transcripts`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from concurrent.futures import Future
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from omni_core.chat.pipeline import ChatPipeline
from omni_core.contract.messages import ChatDelta, ChatUsage
from omni_core.contract.types import AudioChunk, GenerationResult
from omni_core.runtime.jobs import Job
from omni_core.serving import chat_inputs, compat, media, stage_metrics, streams
from omni_core.serving.errors import from_exception
from omni_core.serving.http import await_job, request_id, submit_streaming, validate
from omni_core.serving.models import ServedModel
from omni_core.serving.schemas import ChatAnswerBody, ChatAudio
from omni_core.serving.state import ServerState

log = logging.getLogger("omni.serving")

#: Seconds an audio answer's transcript is kept for later turns that name it (``expires_at``).
AUDIO_TTL_S = 3600
#: What a streaming job's queue carries: the deltas, then the job's finished future.
Item = ChatDelta | Future[GenerationResult]


def _usage(usage: ChatUsage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def _codec(fmt: str) -> str:
    return "pcm" if fmt == "pcm16" else fmt


def _error_event(exc: BaseException) -> bytes:
    return f"data: {json.dumps(from_exception(exc).body())}\n\n".encode()


class _AudioPieces:
    """A streamed answer's audio: encoded as it comes (the encoder starts at the first piece's
    rate), each piece put in the delta's ``audio.data``."""

    def __init__(self, audio_id: str, fmt: str) -> None:
        self.audio_id, self.fmt, self.encoder = audio_id, fmt, None

    def add(self, delta: dict[str, Any], chunk: AudioChunk) -> None:
        if not len(chunk.samples):
            return
        if self.encoder is None:
            self.encoder, _ = media.stream_encoder(self.fmt, chunk.sample_rate)
        data = self.encoder.encode(chunk.samples)
        if data:
            delta.setdefault("audio", {"id": self.audio_id})["data"] = media.b64(data)

    def close(self, delta: dict[str, Any]) -> None:
        tail = self.encoder.close() if self.encoder is not None else b""
        if tail:
            delta.setdefault("audio", {"id": self.audio_id})["data"] = media.b64(tail)


async def answer(
    state: ServerState, served: ServedModel, data: dict[str, Any], request: Request
) -> Response:
    """Answer one chat request of a chat model (the body is read, the model picked)."""
    data = compat.translate("chat.answers", data, request, served.pipeline)
    named = "modalities" in data
    body = validate(ChatAnswerBody, data)
    parsed = chat_inputs.parse_messages(body.messages, state.transcripts.live())
    await chat_inputs.decode_media(parsed, state, request)
    # vLLM-Omni's clients send no `audio` object: they get its shapes (module doc)
    vllm = body.audio is None
    modalities = list(body.modalities)
    pipeline = served.pipeline
    if not named and vllm and state.config.chat_modalities == "model":
        assert isinstance(pipeline, ChatPipeline)
        modalities = list(pipeline.output_modalities)
    spoken = "audio" in modalities
    audio = body.audio or ChatAudio()
    if body.audio is not None and not spoken:
        compat.ignore(request, "audio")  # no audio is asked for: it cannot change the answer
    fmt = audio.format or ("pcm16" if body.stream and not vllm else "wav")
    fields: dict[str, Any] = {
        "messages": parsed.messages,
        "modalities": ("text", "audio") if spoken else ("text",),
        "voice": audio.voice_id() if spoken else None,
        "max_tokens": body.max_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "top_k": 0 if body.top_k == -1 else body.top_k,
        "seed": body.seed,
        "stream": body.stream,
    }
    fields = {k: v for k, v in fields.items() if v is not None}
    gen = state.build_request(served, fields, extras=body.extras(), request_id=request_id(request))
    cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    audio_id = f"audio_{uuid.uuid4().hex}"
    expires = created + AUDIO_TTL_S
    head = {"id": cid, "created": created, "model": served.id}
    headers = compat.headers(request)

    def remember(transcript: str) -> None:
        state.transcripts.remember(audio_id, expires, transcript)

    reported = stage_metrics.requested(request, state.config)

    if not body.stream:
        result = await await_job(served, state.submit(served, Job(gen)), request)
        text = result.text or ""
        message: dict[str, Any] = {"role": "assistant", "content": text}
        t0 = time.perf_counter()
        if spoken:
            import numpy as np

            samples = result.audio if result.audio is not None else np.zeros(0, np.float32)
            rate = int(result.sample_rate or 24000)
            encoded = await asyncio.to_thread(media.encode_audio, samples, rate, _codec(fmt))
            message["audio"] = {
                "id": audio_id,
                "data": media.b64(encoded),
                "expires_at": expires,
                "transcript": text,
            }
            headers["x-omni-sample-rate"] = str(rate)
            remember(text)
        finish = result.info.get("finish_reason", "stop")
        choices = [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}]
        if vllm and spoken:  # vLLM-Omni: the text, then the audio in a choice of its own
            spoken_message = {"role": "assistant", "content": None, "audio": message.pop("audio")}
            choices.append(
                {"index": 0, "message": spoken_message, "logprobs": None, "finish_reason": "stop"}
            )
        payload = {
            **head,
            "object": "chat.completion",
            "choices": choices,
            "usage": _usage(result.info.get("usage") or ChatUsage()),
        }
        if reported:  # where vLLM-Omni's benchmark reads them
            payload["metrics"] = stage_metrics.metrics(result, time.perf_counter() - t0)
        return JSONResponse(payload, headers=headers)

    job, queue, first = await submit_streaming(state, served, gen)
    engine = served.engine
    assert engine is not None
    if isinstance(first, Future) and first.exception() is not None:
        raise from_exception(first.exception())  # type: ignore[arg-type]
    include_usage = bool((body.stream_options or {}).get("include_usage"))

    def event(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
        choices = (
            []
            if delta is None
            else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        )
        chunk = {**head, "object": "chat.completion.chunk", "choices": choices, **extra}
        return f"data: {json.dumps(chunk)}\n\n".encode()

    def closing(result: GenerationResult, last: dict[str, Any], **extra: Any) -> list[bytes]:
        """The last choice chunk (with the finish reason, and the metrics when asked for),
        the usage chunk when asked, DONE."""
        if reported:
            extra["metrics"] = stage_metrics.metrics(result)
        out = [event(last, result.info.get("finish_reason", "stop"), **extra)]
        if include_usage:
            out.append(event(None, usage=_usage(result.info.get("usage") or ChatUsage())))
        return [*out, b"data: [DONE]\n\n"]

    async def guarded(chunks: AsyncGenerator[bytes, None]) -> AsyncIterator[bytes]:
        """``chunks`` (an exception among them ends the stream with an error event), and the
        answer cancelled if the client leaves before its end."""
        events = streams.end_with_error_event(chunks, gen.request_id, _error_event)
        try:
            async for chunk in events:
                yield chunk
        finally:
            await events.aclose()
            await chunks.aclose()
            if not job.future.done():
                engine.cancel(job, "the client disconnected")

    def failed(exc: BaseException) -> bytes:
        """The error event of an answer that failed mid-stream (the engine's outcome)."""
        log.error("request %s failed mid-stream: %s", gen.request_id, exc)
        return _error_event(exc)

    async def vllm_events() -> AsyncGenerator[bytes, None]:
        """vLLM-Omni's stream: each chunk says its ``modality``; an audio chunk's
        ``delta.content`` is a base64 WAV file of that piece; the finish reason comes last."""
        item: Item = first
        yield event({"role": "assistant", "content": ""}, modality="text")
        while isinstance(item, ChatDelta):
            if item.text:
                yield event({"content": item.text}, modality="text")
            if item.audio is not None and len(item.audio.samples):
                chunk = item.audio
                wav = await asyncio.to_thread(
                    media.encode_audio, chunk.samples, chunk.sample_rate, "wav"
                )
                yield event({"content": media.b64(wav)}, modality="audio")
            item = await queue.get()
        if (exc := item.exception()) is not None:
            yield failed(exc)
            return
        for chunk in closing(item.result(), {}, modality="audio" if spoken else "text"):
            yield chunk

    async def events() -> AsyncGenerator[bytes, None]:
        item: Item = first
        audio = _AudioPieces(audio_id, _codec(fmt)) if spoken else None
        transcript: list[str] = []
        yield event({"role": "assistant", "content": ""})
        while isinstance(item, ChatDelta):
            delta: dict[str, Any] = {}
            if item.text:
                transcript.append(item.text)
                delta["content"] = item.text
                if audio is not None:
                    delta["audio"] = {"id": audio_id, "transcript": item.text}
            if audio is not None and item.audio is not None:
                audio.add(delta, item.audio)  # raising (a rate the format cannot carry): guarded
            if delta:
                yield event(delta)
            item = await queue.get()
        if (exc := item.exception()) is not None:
            yield failed(exc)
            return
        last: dict[str, Any] = {}
        if audio is not None:
            last["audio"] = {"id": audio_id, "expires_at": expires}
            audio.close(last)
            remember("".join(transcript))
        for chunk in closing(item.result(), last):
            yield chunk

    return StreamingResponse(
        guarded(vllm_events() if vllm and spoken else events()),
        media_type="text/event-stream",
        headers={**headers, "Cache-Control": "no-cache"},
    )
