"""``POST /v1/audio/generate``: text to audio (sound effects, music) in vLLM-Omni's shape, for
any served pipeline whose spec has the ``t2a`` task (modality ``audio``).

vLLM-Omni's body: ``input`` (the prompt), ``audio_length`` and ``audio_start`` in seconds,
``negative_prompt``, ``guidance_scale``, ``num_inference_steps``, ``seed``, ``response_format``
(``wav``, ``pcm``, ``flac``, ``mp3``), ``speed`` (1 only) and ``stream_format`` (``audio``
only); the answer is the audio file itself. Also taken, for callers of diffusers' API:
``prompt`` for ``input``, ``duration`` for ``audio_length``, ``audio_start_in_s`` and
``audio_end_in_s``. They become the shared request's ``duration_s`` and ``audio_start_s``; the
pipeline checks them against its model (and fills in its defaults); other fields are its
extras. A clip is at most :data:`MAX_AUDIO_S` seconds whatever the model says.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from omni_core.contract.errors import InvalidRequestError
from omni_core.media import audio as codecs
from omni_core.runtime.jobs import Job
from omni_core.serving import compat
from omni_core.serving.errors import APIError, from_exception, invalid
from omni_core.serving.http import await_job, read_json, request_id, validate
from omni_core.serving.models import pick
from omni_core.serving.openapi import body_spec
from omni_core.serving.schemas import MAX_AUDIO_S, AudioGenerationBody
from omni_core.serving.state import ServerState

#: The longest clip one request may ask for (the model's own limit is usually far lower).
#: vLLM-Omni's field names first, then the aliases (diffusers' names) -> the same value.
_ALIASES = {
    "input": ("prompt",),
    "audio_length": ("duration",),
    "audio_start": ("audio_start_in_s",),
}

#: The shared request's field -> the body's (for the ``param`` of a refusal).
_BODY_NAMES = {"duration_s": "audio_length", "audio_start_s": "audio_start", "prompt": "input"}


def _unalias(data: dict[str, Any]) -> dict[str, Any]:
    """vLLM-Omni's names for the aliases; both names at once is a 400."""
    data = dict(data)
    for name, aliases in _ALIASES.items():
        for alias in aliases:
            if alias in data:
                if name in data:
                    raise invalid(f"{alias}: give {name} or {alias}, not both", alias)
                data[name] = data.pop(alias)
    return data


def _fields(body: AudioGenerationBody) -> dict[str, Any]:
    """The shared request fields of ``body`` (``audio_end_in_s`` -> a length)."""
    if body.speed != 1.0:
        raise invalid(f"speed: generated audio is not sped up; send 1, not {body.speed}", "speed")
    if body.stream_format not in (None, "audio"):
        raise invalid(
            f"stream_format: {body.stream_format!r} is not supported; the answer is the audio "
            "file ('audio')",
            "stream_format",
        )
    length, start = body.audio_length, body.audio_start
    if body.audio_end_in_s is not None:
        end_length = body.audio_end_in_s - (start or 0.0)
        if end_length <= 0:
            raise invalid(
                f"audio_end_in_s: {body.audio_end_in_s:g} s is not after audio_start "
                f"{start or 0.0:g} s",
                "audio_end_in_s",
            )
        if length is not None and abs(length - end_length) > 1e-6:
            raise invalid(
                "audio_end_in_s: disagrees with audio_length; give one of them", "audio_end_in_s"
            )
        length = end_length
    if not body.input.strip():
        raise invalid("input: the prompt is empty", "input")
    fields: dict[str, Any] = {"prompt": body.input}
    for name in ("negative_prompt", "seed", "num_inference_steps", "guidance_scale", "lora"):
        value = getattr(body, name)
        if value is not None:
            fields[name] = value
    if length is not None:
        fields["duration_s"] = length
    if start is not None:
        fields["audio_start_s"] = start
    return fields


def add_routes(router: APIRouter, state: ServerState) -> None:
    config = state.config

    @router.post(
        "/audio/generate",
        summary="Create audio (sound effects, music) from a prompt",
        openapi_extra=body_spec(
            AudioGenerationBody,
            multipart=False,
            json_body=True,
            files={},
            model_ids=state.models,
        ),
        response_class=Response,
    )
    async def generate(request: Request) -> Response:
        data = _unalias(await read_json(request, config))
        served = pick(state.models, compat.model_of(data), "audio", task="t2a")
        body = validate(AudioGenerationBody, data)
        try:
            fmt = codecs.check_format(body.response_format)
        except InvalidRequestError as exc:
            raise from_exception(exc) from None
        try:
            gen = state.build_request(
                served, _fields(body), extras=body.extras(), request_id=request_id(request)
            )
        except APIError as exc:  # the pipeline names the shared fields; say the body's names
            exc.param = _BODY_NAMES.get(exc.param or "", exc.param)
            raise

        if gen.duration_s is not None and gen.duration_s > MAX_AUDIO_S:
            raise invalid(f"audio_length: at most {MAX_AUDIO_S:g} s", "audio_length")
        job = state.submit(served, Job(gen))
        result = await await_job(served, job, request)
        if result.audio is None or not result.sample_rate:
            raise from_exception(RuntimeError(f"model {served.id!r} returned no audio"))
        samples, rate = result.audio, int(result.sample_rate)
        blob = await asyncio.to_thread(codecs.encode_audio, samples, rate, fmt)
        channels = 1 if getattr(samples, "ndim", 1) == 1 else int(samples.shape[1])
        headers = {
            **compat.headers(request),
            "X-Sample-Rate": str(rate),
            "X-Audio-Channels": str(channels),
            "X-Audio-Duration": f"{len(samples) / rate:.3f}",
            "Content-Disposition": f'attachment; filename="audio.{fmt}"',
        }
        return Response(blob, media_type=codecs.MEDIA_TYPES[fmt], headers=headers)
