"""``POST /v1/chat/completions``: the one route of OpenAI's chat API. The served model decides
who answers: a chat model (text, and speech from omni models) is answered by
:mod:`omni_core.serving.routes.chat.answers`, an image model (vLLM-Omni's text-to-image path)
by :mod:`omni_core.serving.routes.diffusion.image_chat`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from omni_core.serving import compat
from omni_core.serving.http import read_json
from omni_core.serving.models import Modality, pick
from omni_core.serving.openapi import body_spec
from omni_core.serving.routes.chat import answers
from omni_core.serving.routes.diffusion import image_chat
from omni_core.serving.schemas import ChatBody
from omni_core.serving.state import ServerState


def _kinds(data: dict[str, Any]) -> tuple[Modality, ...]:
    """The served models a body may mean: image and chat models alike, unless it names no
    model and its ``modalities`` tell which (``["image"]``, or text / audio)."""
    modalities = data.get("modalities")
    if data.get("model") is None and isinstance(modalities, list) and modalities:
        return ("image",) if all(m == "image" for m in modalities) else ("chat",)
    return ("image", "chat")


def add_routes(router: APIRouter, state: ServerState) -> None:
    @router.post(
        "/chat/completions",
        summary="Chat: text (and speech) answers of chat models; images from image models",
        openapi_extra=body_spec(
            ChatBody, multipart=False, json_body=True, files={}, model_ids=state.models
        ),
    )
    async def chat(request: Request) -> Response:
        data = await read_json(request, state.config)
        served = pick(state.models, compat.model_of(data), _kinds(data))
        if served.modality == "chat":
            return await answers.answer(state, served, data, request)
        return await image_chat.answer(state, served, data, request)
