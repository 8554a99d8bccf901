"""``/v1/images``: generations (JSON), edits (multipart with ``image`` files), and the files of
``response_format=url`` answers."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from starlette.datastructures import UploadFile

from omni_core.engine import Job
from omni_core.serving import media
from omni_core.serving.errors import APIError, invalid
from omni_core.serving.http import (
    FORM_TYPES,
    await_job,
    diffusion_fields,
    form_fields,
    form_files,
    read_form,
    read_json,
    request_id,
    upload_bytes,
    validate,
)
from omni_core.serving.models import ServedModel, pick
from omni_core.serving.openapi import body_spec
from omni_core.serving.schemas import ImageEditBody, ImageGenerationBody
from omni_core.serving.state import ServerState

#: The only file parts /v1/images/edits reads (OpenAI's clients send ``image`` or ``image[]``).
IMAGE_KEYS = ("image", "image[]")


def add_routes(router: APIRouter, state: ServerState) -> None:
    config = state.config

    async def respond(
        served: ServedModel, body: ImageGenerationBody, job: Job, http_request: Request
    ) -> dict[str, Any]:
        result = await await_job(served, job, http_request)
        images = list(result.images or [])
        fmt = body.output_format
        encoded = await asyncio.to_thread(lambda: [media.encode_image(im, fmt) for im in images])
        data = []
        for blob in encoded:
            if body.response_format == "url":
                assert state.store is not None
                name = f"{uuid.uuid4().hex}.{fmt}"
                (state.store.images / name).write_bytes(blob)
                data.append({"url": f"/v1/images/files/{name}"})
            else:
                data.append({"b64_json": media.b64(blob)})
        return {
            "created": int(time.time()),
            "data": data,
            "output_format": fmt,
            "usage": {"steps": int(result.timings.get("steps", 0))},
        }

    @router.post(
        "/images/generations",
        summary="Create images from a prompt",
        openapi_extra=body_spec(
            ImageGenerationBody,
            multipart=False,
            json_body=True,
            files={},
            model_ids=state.models,
        ),
    )
    async def generations(request: Request) -> dict[str, Any]:
        body = validate(ImageGenerationBody, await read_json(request, config))
        served = pick(state.models, body.model, "image")
        gen = state.build_request(
            served,
            {**diffusion_fields(body), "num_outputs": body.n},
            extras=body.extras(),
            request_id=request_id(request),
        )
        job = state.submit(served, Job(gen))
        return await respond(served, body, job, request)

    @router.post(
        "/images/edits",
        summary="Edit one or more images given a prompt",
        openapi_extra=body_spec(
            ImageEditBody,
            multipart=True,
            json_body=False,
            files={"image": True},
            model_ids=state.models,
        ),
    )
    async def edits(request: Request) -> dict[str, Any]:
        ctype = request.headers.get("content-type", "")
        if not ctype.startswith(FORM_TYPES):
            raise APIError(
                415,
                "images/edits takes multipart/form-data with 'image' files",
                code="unsupported_media_type",
            )
        form = await read_form(request, config)
        try:
            if "mask" in form:
                raise invalid(
                    "mask: masks are not supported; describe the edit in the prompt",
                    "mask",
                    code="unsupported_parameter",
                )
            form_files(form, IMAGE_KEYS)  # a file under any other key: 400 naming it
            fields = form_fields(form)
            for key in IMAGE_KEYS:
                if key in fields:
                    raise invalid(f"{key}: expected a file upload, got a text field", key)
            body = validate(ImageEditBody, fields)
            uploads = [
                v for k, v in form.multi_items() if k in IMAGE_KEYS and isinstance(v, UploadFile)
            ]
            if not uploads:
                raise APIError(
                    400,
                    "missing required parameter: image (one or more files)",
                    param="image",
                    code="missing_required_parameter",
                )
            served = pick(state.models, body.model, "image", task="i2i")
            images = []
            for i, upload in enumerate(uploads):
                param = "image" if len(uploads) == 1 else f"image[{i}]"
                data = await upload_bytes(upload, param, config)
                images.append(await asyncio.to_thread(media.decode_image, data, param))
        finally:
            await form.close()
        gen = state.build_request(
            served,
            {**diffusion_fields(body), "num_outputs": body.n, "images": images},
            extras=body.extras(),
            request_id=request_id(request),
        )
        job = state.submit(served, Job(gen))
        return await respond(served, body, job, request)

    @router.get("/images/files/{name}", summary="An image returned with response_format=url")
    async def image_file(name: str) -> FileResponse:
        assert state.store is not None
        if not re.fullmatch(r"[0-9a-f]{32}\.(png|jpeg|webp)", name):
            raise APIError(404, f"no image {name!r}", code="not_found")
        path = state.store.images / name
        if not path.is_file():
            raise APIError(404, f"no image {name!r}", code="not_found")
        return FileResponse(path, media_type=media.IMAGE_FORMATS[name.rsplit(".", 1)[1]][1])
