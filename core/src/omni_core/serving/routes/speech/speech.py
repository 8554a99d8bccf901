"""``POST /v1/audio/speech``: speech as a whole file, a chunked raw stream or server-sent events.

A body passes through :func:`omni_core.serving.compat.translate`, the one place that says what
each foreign field becomes for the model asked (vLLM-Omni's ``task_type``, the token sampling
fields, reference audio, ...; a field the pipeline's extras declare is the pipeline's own),
then is built into the request. ``stream: true`` alone (vLLM-Omni's, the openai SDK never
sends it) streams SSE events. The voices are :mod:`omni_core.serving.routes.speech.voices`."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from omni_core.contract.types import AudioChunk, GenerationRequest, GenerationResult
from omni_core.runtime.jobs import Job
from omni_core.serving import compat, media, stage_metrics, streams
from omni_core.serving.errors import APIError, from_exception
from omni_core.serving.http import (
    await_job,
    read_json,
    request_id,
    submit_streaming,
    validate,
)
from omni_core.serving.models import ServedModel, pick
from omni_core.serving.openapi import body_spec
from omni_core.serving.routes.speech import voices
from omni_core.serving.schemas import SpeechBody
from omni_core.serving.state import ServerState
from omni_core.serving.timings import RequestMarks
from omni_core.speech.pipeline import SpeechPipeline

log = logging.getLogger("omni.serving")

#: What a streaming job's queue carries: audio deltas, then the job's finished future.
Item = AudioChunk | Future[GenerationResult]

#: Language names clients send (vLLM-Omni: "English") -> the code a voice's language starts with.
_LANGUAGES = {
    "english": "en", "chinese": "zh", "japanese": "ja", "korean": "ko", "german": "de",
    "french": "fr", "spanish": "es", "italian": "it", "portuguese": "pt", "russian": "ru",
}  # fmt: skip


def _voice_language(pipeline: SpeechPipeline, voice: str | None) -> str | None:
    voices = pipeline.voices()
    chosen = next((v for v in voices if v.id == voice), voices[0] if voices else None)
    return chosen.language if chosen is not None else None


def _speaks(asked: str, language: str | None) -> bool:
    """Whether a voice of ``language`` speaks ``asked`` ("Auto" and unknown: it does)."""
    if language is None or asked.lower() == "auto":
        return True
    code = _LANGUAGES.get(asked.lower(), asked.lower())
    return language.lower().replace("-", "_").startswith(code.replace("-", "_"))


def _voice_of(data: dict[str, Any]) -> str | None:
    voice = data.get("voice")
    if isinstance(voice, dict):
        voice = voice.get("id")
    return voice if isinstance(voice, str) and voice else None


@dataclass
class SpeechCall:
    """A speech body made ready: the model that speaks it, the body, the audio format and the
    validated request (``streamed``: the body asked for a stream)."""

    served: ServedModel
    body: SpeechBody
    format: str
    request: GenerationRequest
    streamed: bool


async def speech_call(
    state: ServerState,
    data: dict[str, Any],
    request: Request | None,
    rid: str,
    *,
    piece: bool = False,
) -> SpeechCall:
    """``POST /v1/audio/speech``'s body -> the request to run (400 on any problem); also what
    each sentence of the WebSocket text stream is (:mod:`.stream`, ``request`` None, ``piece``:
    the text is a piece of a longer script, spoken with the ``speakers`` its lines use, all of
    them checked)."""
    served = pick(state.models, compat.model_of(data), "speech")
    pipeline = served.pipeline
    assert isinstance(pipeline, SpeechPipeline)
    data = compat.translate("speech", data, request, pipeline)
    reference, uploaded = await voices.reference_for(state, served, data, _voice_of(data))
    speakers = await voices.speakers_for(state, served, data)
    if piece and speakers:
        speakers = voices.speakers_of_piece(pipeline, str(data.get("input", "")), speakers)
    body = validate(SpeechBody, data)
    # no format given: the server's (--speech-format, wav by default as in vLLM-Omni)
    fmt = body.response_format or state.config.speech_format
    extras = body.extras()
    if body.language is not None:
        spoken = _voice_language(pipeline, body.voice_id())
        actual = body.language if _speaks(body.language, spoken) else spoken
        compat.pipeline_field(pipeline, "language", body.language, actual, extras, request)
    streamed = body.stream or body.stream_format is not None
    fields: dict[str, Any] = {"prompt": body.input, "speed": body.speed, **body.sampling()}
    fields["stream"] = streamed
    voice = body.voice_id()
    if reference is not None and not uploaded and voice is not None:
        if voice not in {v.id for v in pipeline.voices()}:  # the openai SDK sends one always
            compat.ignore(request, "voice")  # ref_audio is the voice: reported, not used
            voice = None
    if voice is not None and not uploaded:
        fields["voice"] = voice
    if reference is not None:
        fields["reference"] = reference
    if speakers:
        fields["speakers"] = speakers
    if body.seed is not None:
        fields["seed"] = body.seed
    gen = state.build_request(served, fields, extras=extras, request_id=rid)
    return SpeechCall(served, body, fmt, gen, streamed)


def add_routes(router: APIRouter, state: ServerState) -> None:
    @router.post(
        "/audio/speech",
        summary="Synthesize speech (whole file, chunked PCM or SSE)",
        response_class=Response,
        openapi_extra=body_spec(
            SpeechBody, multipart=False, json_body=True, files={}, model_ids=state.models
        ),
    )
    async def speech(request: Request) -> Response:
        timings = state.timings
        marks = RequestMarks(request_id(request)) if timings is not None else None
        data = await read_json(request, state.config)
        if marks is not None:
            marks.mark("body_read")
        rid = marks.request_id if marks is not None else request_id(request)
        call = await speech_call(state, data, request, rid)
        served, body, fmt, gen, streamed = (
            call.served,
            call.body,
            call.format,
            call.request,
            call.streamed,
        )
        headers = compat.headers(request)
        if not streamed:
            job = state.submit(served, Job(gen))
            result = await await_job(served, job, request)
            audio, rate = result.audio, int(result.sample_rate or 0)
            if body.sample_rate is not None and body.sample_rate != rate:
                from omni_core.media import dsp

                audio, rate = dsp.resample(audio, rate, body.sample_rate), body.sample_rate
            t0 = time.perf_counter()
            encoded = await asyncio.to_thread(media.encode_audio, audio, rate, fmt)
            headers["x-omni-sample-rate"] = str(rate)
            if stage_metrics.requested(request, state.config):  # the body is audio: a header
                ran = stage_metrics.metrics(result, time.perf_counter() - t0)
                headers["X-Omni-Metrics"] = json.dumps(ran)
            return Response(encoded, media_type=media.AUDIO_MEDIA_TYPES[fmt], headers=headers)

        # stream_format wins; stream: true alone is vLLM-Omni's request for events.
        sse = (body.stream_format or "sse") == "sse"
        job, queue, first = await submit_streaming(state, served, gen, marks)
        engine = served.engine
        assert engine is not None
        if isinstance(first, AudioChunk):
            rate = first.sample_rate
        else:  # the future finished before any audio
            exc = first.exception()
            if exc is not None:
                raise from_exception(exc)
            rate = int(first.result().sample_rate or 0)
        if body.sample_rate is not None and body.sample_rate != rate:
            engine.cancel(job, "refused: sample_rate")
            raise APIError(
                400,
                f"sample_rate={body.sample_rate}: a stream comes at the model's rate ({rate} Hz); "
                "drop sample_rate or ask for the whole file, which is resampled",
                param="sample_rate",
                code="unsupported_parameter",
            )
        # SSE carries base64 PCM deltas (OpenAI's speech.audio.delta); a raw stream is encoded.
        encoder, _ = media.stream_encoder("pcm" if sse else fmt, rate)

        async def items() -> AsyncIterator[Item]:
            item: Item = first
            try:
                while isinstance(item, AudioChunk):
                    yield item
                    item = await queue.get()
                yield item  # the finished future
            finally:
                if not job.future.done():
                    engine.cancel(job, "the client disconnected")
                if marks is not None and timings is not None:
                    marks.mark("done")
                    timings.write(marks)

        async def audio_stream() -> AsyncIterator[bytes]:
            async with contextlib.aclosing(items()) as pieces:
                async for item in pieces:
                    if isinstance(item, AudioChunk):
                        data = encoder.encode(item.samples)
                        if data:
                            if marks is not None:
                                marks.mark("first_bytes")
                            yield data
                    elif (exc := item.exception()) is not None:
                        raise streams.cut(gen.request_id, exc)  # not a whole file: cut it
                    else:
                        tail = encoder.close()
                        if tail:
                            yield tail

        async def sse_stream() -> AsyncIterator[bytes]:
            samples = 0
            async with contextlib.aclosing(items()) as pieces:
                async for item in pieces:
                    if isinstance(item, AudioChunk):
                        samples += len(item.samples)
                        event = {
                            "type": "speech.audio.delta",
                            "audio": base64.b64encode(encoder.encode(item.samples)).decode(),
                        }
                    elif (exc := item.exception()) is not None:
                        log.error("request %s failed mid-stream: %s", gen.request_id, exc)
                        yield error_event(exc)
                        return
                    else:
                        event = {
                            "type": "speech.audio.done",
                            "sample_rate": rate,
                            "audio_seconds": samples / rate,
                            "usage": {
                                "input_tokens": len(body.input),
                                "output_tokens": 0,
                                "total_tokens": len(body.input),
                            },
                        }
                        if stage_metrics.requested(request, state.config):
                            event["metrics"] = stage_metrics.metrics(item.result())
                    yield f"data: {json.dumps(event)}\n\n".encode()

        def error_event(exc: BaseException) -> bytes:
            event = {"type": "error", "error": from_exception(exc).body()["error"]}
            return f"data: {json.dumps(event)}\n\n".encode()

        headers = {**headers, "x-omni-sample-rate": str(rate), "Cache-Control": "no-cache"}
        if sse:
            events = streams.end_with_error_event(sse_stream(), gen.request_id, error_event)
            return StreamingResponse(events, media_type="text/event-stream", headers=headers)
        chunks = streams.cut_on_error(audio_stream(), gen.request_id)
        return StreamingResponse(chunks, media_type=encoder.media_type, headers=headers)
