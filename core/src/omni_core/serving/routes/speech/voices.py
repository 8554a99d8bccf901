"""``/v1/audio/voices``: the voices of the served speech models (and of omni models' spoken
answers), and uploaded voices.

``GET`` lists both (vLLM-Omni's ``voices`` names plus omni's ``data`` with languages, models and
``uploaded``); ``POST`` (multipart: ``name``, the ``audio`` file, optional ``transcript``,
``consent`` required, optional ``model`` and ``language``) stores a reference voice and prepares
it for every served model that clones voices; ``DELETE /v1/audio/voices/{name}`` removes it.
:func:`reference_for` is what the speech route asks: the voice a request clones, if any;
:func:`speakers_for` the voices of a multi-speaker request's speakers, :func:`speakers_of_piece`
those a piece of a longer script uses (a sentence of the WebSocket text stream).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Query, Request

from omni_core.chat.pipeline import ChatPipeline
from omni_core.contract.errors import InvalidRequestError
from omni_core.contract.types import ReferenceVoice, Voice
from omni_core.serving import media
from omni_core.serving.errors import APIError, from_exception, invalid
from omni_core.serving.http import form_fields, form_files, read_form, upload_bytes
from omni_core.serving.models import ServedModel
from omni_core.serving.state import ServerState
from omni_core.speech.pipeline import SpeechPipeline, check_speakers
from omni_core.speech.voices import check_name, decode_reference

_CONSENT_FALSE = {"", "0", "false", "no", "off", "none"}


def _ready_models(state: ServerState, model: str | None) -> list[ServedModel]:
    if model is not None and model not in state.models:
        raise APIError(
            400,  # vLLM-Omni's status: these are its endpoints (OpenAI's 404 is OpenAI's)
            f"the model {model!r} does not exist on this server",
            param="model",
            code="model_not_found",
        )
    return [
        served
        for served in state.models.values()
        if served.status == "ready" and (model is None or served.id == model)
    ]


def _speech_models(state: ServerState, model: str | None) -> list[ServedModel]:
    return [s for s in _ready_models(state, model) if isinstance(s.pipeline, SpeechPipeline)]


def cloning_models(state: ServerState) -> list[ServedModel]:
    """The served models uploaded voices are for (loading ones count: they may clone)."""
    return [
        s
        for s in state.models.values()
        if s.status == "loading"
        or (
            s.status == "ready"
            and isinstance(s.pipeline, SpeechPipeline)
            and s.pipeline.clones_voices
        )
    ]


def _voices_of(served: ServedModel) -> list[Voice]:
    """The voices a served model speaks in: a speech model's, or an omni model's answers'."""
    pipeline = served.pipeline
    if isinstance(pipeline, SpeechPipeline):
        return pipeline.voices()
    if isinstance(pipeline, ChatPipeline) and "audio" in pipeline.output_modalities:
        return pipeline.voices()
    return []


async def reference_for(
    state: ServerState, served: ServedModel, data: dict[str, Any], voice: str | None
) -> tuple[ReferenceVoice | None, bool]:
    """The voice a speech body clones: ``ref_audio`` (+ ``ref_text``) sent with it, or an
    uploaded voice named by ``voice``; ``(reference, voice_is_uploaded)``. The fields are taken
    out of a translated ``data`` (compat refused them already for a model that cannot clone);
    an uploaded voice for such a model is a 400 naming ``voice``."""
    pipeline = served.pipeline
    assert isinstance(pipeline, SpeechPipeline)
    ref_audio, ref_text = data.pop("ref_audio", None), data.pop("ref_text", None)
    if ref_audio is None and ref_text is not None:
        raise invalid("ref_text: give it with ref_audio (the audio it transcribes)", "ref_text")
    if ref_audio is not None:
        if not isinstance(ref_audio, str) or (
            ref_text is not None and not isinstance(ref_text, str)
        ):
            raise invalid("ref_audio: expected a data URL, base64 or an http(s) URL", "ref_audio")
        if ref_audio.startswith(("data:", "http://", "https://")):
            raw = await media.fetch_url(
                ref_audio,
                param="ref_audio",
                allowed_hosts=state.allowed_hosts,
                max_bytes=state.config.max_upload_bytes,
            )
        else:
            raw = media.parse_data_url("data:audio/*;base64," + ref_audio, "ref_audio")
        audio, rate = await asyncio.to_thread(decode_reference, raw, param="ref_audio")
        return ReferenceVoice(audio=audio, sample_rate=rate, transcript=ref_text), False
    if voice is None or voice in {v.id for v in pipeline.voices()}:
        return None, False
    store = state.voices
    if store.get(voice) is None:
        return None, False  # the pipeline's own check names the voices it has
    if not pipeline.clones_voices:
        raise invalid(
            f"voice: {voice!r} is an uploaded voice; the model {served.id!r} cannot clone voices",
            "voice",
            code="unsupported_parameter",
        )
    try:
        return await asyncio.to_thread(store.prepared, voice, served.id, pipeline), True
    except Exception as exc:  # noqa: BLE001 - an InvalidRequestError becomes a 400, others 500
        raise from_exception(exc) from None


async def speakers_for(
    state: ServerState, served: ServedModel, data: dict[str, Any]
) -> dict[str, str | ReferenceVoice]:
    """Each speaker's voice of a multi-speaker body (``speakers``: label -> voice name): a
    voice of the model stays its id, an uploaded one becomes its prepared reference (compat
    refused the field for a model that speaks one voice; the pipeline checks the rest)."""
    speakers = data.pop("speakers", None)
    if not speakers:
        return {}
    pipeline = served.pipeline
    assert isinstance(pipeline, SpeechPipeline)
    own = {v.id for v in pipeline.voices()}
    out: dict[str, str | ReferenceVoice] = {}
    for label, voice in speakers.items():
        if voice in own or state.voices.get(voice) is None:
            out[label] = voice  # unknown names: the pipeline's check lists the voices it has
            continue
        if not pipeline.clones_voices:
            raise invalid(
                f"speakers: {voice!r} is an uploaded voice; the model {served.id!r} cannot "
                "clone voices",
                "speakers",
                code="unsupported_parameter",
            )
        try:
            out[label] = await asyncio.to_thread(state.voices.prepared, voice, served.id, pipeline)
        except Exception as exc:  # noqa: BLE001 - an InvalidRequestError becomes a 400
            raise from_exception(exc) from None
    return out


def speakers_of_piece(
    pipeline: SpeechPipeline, text: str, speakers: dict[str, str | ReferenceVoice]
) -> dict[str, str | ReferenceVoice]:
    """The voices of a piece of a longer script (a WebSocket sentence): every speaker checked
    (count, voices, cloning: 400 on ``speakers``), then those the piece's lines use."""
    try:
        check_speakers(
            speakers,
            pipeline.voices(),
            max_speakers=pipeline.max_speakers,
            clones=pipeline.clones_voices,
        )
        return pipeline.speakers_in(text, speakers)
    except InvalidRequestError as exc:
        raise from_exception(exc) from None


def add_routes(router: APIRouter, state: ServerState) -> None:
    @router.get(
        "/audio/voices", summary="Voices of the served speech and omni models, and uploaded ones"
    )
    async def voices(model: str | None = Query(None, max_length=500)) -> dict[str, Any]:
        served_models = _speech_models(state, model)
        data = []
        for served in _ready_models(state, model):
            for voice in _voices_of(served):
                data.append(
                    {
                        "id": voice.id,
                        "object": "voice",
                        "name": voice.name or voice.id,
                        "language": voice.language,
                        "description": voice.description,
                        "model": served.id,
                    }
                )
        cloning = [
            s.id
            for s in served_models
            if isinstance(s.pipeline, SpeechPipeline) and s.pipeline.clones_voices
        ]
        for stored in state.voices.list() if cloning else []:
            data.extend(
                {**stored.as_dict(), "description": "uploaded", "model": m} for m in cloning
            )
        # "voices": vLLM-Omni's shape (the names); "data": omni's, with languages and models.
        return {"object": "list", "voices": sorted({v["id"] for v in data}), "data": data}

    @router.post("/audio/voices", summary="Upload a reference voice (multipart)", status_code=201)
    async def upload(request: Request) -> dict[str, Any]:
        if not cloning_models(state):  # nothing to upload to: not a method of this server
            raise APIError(
                405,
                "no served speech model clones voices, so voices cannot be uploaded here",
                code="method_not_allowed",
                headers={"Allow": "GET"},
            )
        form = await read_form(request, state.config, images=False)
        try:
            files = form_files(form, ("audio", "audio_sample", "file"))
            fields = form_fields(form)
            uploads = [f for group in files.values() for f in group]
            if len(uploads) != 1:
                raise invalid("audio: send exactly one audio file", "audio")
            raw = await upload_bytes(uploads[0], "audio", state.config)
        finally:
            await form.close()
        unknown = sorted(
            set(fields) - {"name", "transcript", "ref_text", "consent", "model", "language"}
        )
        if unknown:
            raise invalid(f"unknown field {unknown[0]!r}", unknown[0], code="unknown_parameter")
        name = check_name(str(fields.get("name", "")))
        consent = str(fields.get("consent", "")).strip()
        if consent.lower() in _CONSENT_FALSE:
            raise invalid(
                "consent: required: confirm that the speaker agreed to be cloned "
                "(e.g. consent=true or the speaker's name)",
                "consent",
            )
        transcript = fields.get("transcript", fields.get("ref_text")) or None
        if transcript is not None and len(transcript) > 4096:
            raise invalid("transcript: at most 4096 characters", "transcript")
        targets = [
            s
            for s in _speech_models(state, fields.get("model"))
            if isinstance(s.pipeline, SpeechPipeline) and s.pipeline.clones_voices
        ]
        if not targets:
            raise invalid(
                "no served speech model clones voices", "model", code="unsupported_parameter"
            )
        for served in targets:
            pipeline = served.pipeline
            assert isinstance(pipeline, SpeechPipeline)
            if name in {v.id for v in pipeline.voices()}:
                raise invalid(
                    f"name: {name!r} is a voice of {served.id!r}; pick another",
                    "name",
                    code="voice_exists",
                )
        audio, rate = await asyncio.to_thread(decode_reference, raw)
        store = state.voices
        language = fields.get("language") or None
        stored = store.add(
            name, audio, rate, transcript=transcript, consent=consent, language=language
        )
        try:
            for served in targets:
                await asyncio.to_thread(store.prepared, name, served.id, served.pipeline)
        except Exception as exc:  # noqa: BLE001 - no half-prepared voice stays behind
            store.delete(name)
            raise from_exception(exc) from None
        return {**stored.as_dict(), "models": [s.id for s in targets]}

    @router.delete("/audio/voices/{name}", summary="Delete an uploaded voice")
    async def delete(name: str) -> dict[str, Any]:
        if not state.voices.delete(check_name(name)):
            raise APIError(404, f"no uploaded voice {name!r}", param="name", code="voice_not_found")
        return {"id": name, "object": "voice", "deleted": True}
