"""``/v1/images``: generations (JSON), edits (multipart with ``image`` files, or image URLs),
and the files of ``response_format=url`` answers (absolute URLs). Bodies pass through
:func:`omni_core.serving.compat.translate` first (vLLM-Omni's field names)."""

from __future__ import annotations

import asyncio
import io
import json
import re
import time
import uuid
import zipfile
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.datastructures import UploadFile

from omni_core.runtime.jobs import Job
from omni_core.serving import compat, media, stage_metrics
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
#: Text fields of /v1/images/edits holding image URLs (vLLM-Omni's ``url``; repeatable).
URL_KEYS = ("url", "url[]")


def base_url(request: Request, public_url: str | None) -> str:
    """Where this server is reached: ``--public-url``, else the request's own base URL."""
    return (public_url or str(request.base_url)).rstrip("/")


def _maybe_json(value: str) -> Any:
    """A form field that may hold a JSON list of URLs (``url=["https://..."]``)."""
    if value.startswith("["):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _urls(value: Any, param: str) -> list[str]:
    """A URL, a list of them, or ``{"image_url": URL}`` / ``{"url": URL}`` items -> URLs."""
    items = value if isinstance(value, list) else [value]
    urls = []
    for item in items:
        if isinstance(item, dict):
            item = item.get("image_url", item.get("url"))
            if isinstance(item, dict):
                item = item.get("url")
        if not isinstance(item, str) or not item:
            raise invalid(f"{param}: expected an image URL or a list of them", param)
        urls.append(item)
    return urls


def add_routes(router: APIRouter, state: ServerState) -> None:
    config = state.config

    async def respond(
        served: ServedModel, body: ImageGenerationBody, job: Job, http_request: Request
    ) -> Response:
        result = await await_job(served, job, http_request)
        images = list(result.images or [])
        fmt = body.output_format
        t0 = time.perf_counter()
        encoded = await asyncio.to_thread(lambda: [media.encode_image(im, fmt) for im in images])
        ran = stage_metrics.metrics(result, time.perf_counter() - t0)
        if body.response_format == "file":
            headers = compat.headers(http_request)
            if stage_metrics.requested(http_request, config):
                headers["X-Omni-Metrics"] = json.dumps(ran)
            return file_response(encoded, fmt, headers)
        data = []
        for blob in encoded:
            if body.response_format == "url":
                assert state.outputs is not None
                name = f"{uuid.uuid4().hex}.{fmt}"
                await asyncio.to_thread(state.outputs.put, f"images/{name}", blob)
                base = base_url(http_request, config.public_url)
                data.append({"url": f"{base}/v1/images/files/{name}"})
            else:
                data.append({"b64_json": media.b64(blob)})
        payload = {
            "created": int(time.time()),
            "data": data,
            "output_format": fmt,
            "usage": {"steps": int(result.timings.get("steps", 0))},
        }
        if stage_metrics.requested(http_request, config):  # where vLLM-Omni's benchmark reads them
            payload["stage_durations"] = ran["stage_durations"]
            payload["peak_memory_mb"] = ran["peak_memory_mb"]
            payload["usage"]["peak_memory_mb"] = ran["peak_memory_mb"]
        return JSONResponse(payload, headers=compat.headers(http_request))

    def file_response(encoded: list[bytes], fmt: str, headers: dict[str, str]) -> Response:
        """vLLM-Omni's ``response_format: "file"``: one image as its own bytes (an attachment),
        several as a zip of ``image_<i>.<ext>``."""
        stem = f"image_{uuid.uuid4().hex[:8]}"
        if len(encoded) == 1:
            disposition = f'attachment; filename="{stem}.{fmt}"'
            media_type = media.IMAGE_FORMATS[fmt][1]
            content = encoded[0]
        else:
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as archive:
                for i, blob in enumerate(encoded):
                    archive.writestr(f"image_{i}.{fmt}", blob)
            disposition = f'attachment; filename="{stem}.zip"'
            media_type, content = "application/zip", buf.getvalue()
        return Response(
            content, media_type=media_type, headers={**headers, "Content-Disposition": disposition}
        )

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
    async def generations(request: Request) -> Response:
        data = await read_json(request, config)
        served = pick(state.models, compat.model_of(data), "image")
        data = compat.translate("images.generations", data, request, served.pipeline)
        body = validate(ImageGenerationBody, data)
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
    async def edits(request: Request) -> Response:
        ctype = request.headers.get("content-type", "")
        blobs: list[tuple[str, bytes]] = []
        urls: list[str] = []
        if ctype.startswith(FORM_TYPES):
            form = await read_form(request, config)
            try:
                if "mask" in form:
                    raise invalid(
                        "mask: masks are not supported; describe the edit in the prompt",
                        "mask",
                        code="unsupported_parameter",
                    )
                form_files(form, IMAGE_KEYS)  # a file under any other key: 400 naming it
                for key, value in form.multi_items():
                    if key in URL_KEYS and isinstance(value, str):
                        urls += _urls(_maybe_json(value), key)
                fields = form_fields(form, skip=URL_KEYS)
                for key in IMAGE_KEYS:
                    if key in fields:
                        raise invalid(f"{key}: expected a file upload, got a text field", key)
                uploads = [
                    v
                    for k, v in form.multi_items()
                    if k in IMAGE_KEYS and isinstance(v, UploadFile)
                ]
                for i, upload in enumerate(uploads):
                    param = "image" if len(uploads) == 1 else f"image[{i}]"
                    blobs.append((param, await upload_bytes(upload, param, config)))
            finally:
                await form.close()
        else:
            raise APIError(
                415,
                "images/edits takes multipart/form-data with 'image' files or 'url' fields",
                code="unsupported_media_type",
            )
        served = pick(state.models, compat.model_of(fields), "image", task="i2i")
        fields = compat.translate("images.edits", fields, request, served.pipeline)
        body = validate(ImageEditBody, fields)
        if len(blobs) + len(urls) > config.max_images:
            raise invalid(f"image: at most {config.max_images} images", "image")
        for i, url in enumerate(urls):
            param = "url" if len(urls) == 1 else f"url[{i}]"
            fetched = await media.fetch_url(
                url,
                param=param,
                allowed_hosts=state.allowed_hosts,
                max_bytes=config.max_upload_bytes,
                deadline_s=config.url_fetch_timeout_s,
            )
            blobs.append((param, fetched))
        if not blobs:
            raise APIError(
                400,
                "missing required parameter: image (one or more files, or 'url')",
                param="image",
                code="missing_required_parameter",
            )
        images = await asyncio.to_thread(media.decode_images, blobs, config.max_upload_pixels)
        shared = {**diffusion_fields(body), "num_outputs": body.n, "images": images}
        if body.size is None:  # vLLM-Omni's default: the input image's size
            compat.default_size(served.pipeline, shared, body.extras(), images[0].size, request)
        gen = state.build_request(
            served, shared, extras=body.extras(), request_id=request_id(request)
        )
        job = state.submit(served, Job(gen))
        return await respond(served, body, job, request)

    @router.get("/images/files/{name}", summary="An image returned with response_format=url")
    async def image_file(name: str) -> Response:
        outputs = state.outputs
        assert outputs is not None
        if not re.fullmatch(r"[0-9a-f]{32}\.(png|jpeg|webp)", name):
            raise APIError(404, f"no image {name!r}", code="not_found")
        media_type = media.IMAGE_FORMATS[name.rsplit(".", 1)[1]][1]
        path = await asyncio.to_thread(outputs.local_path, f"images/{name}")
        if path is not None:
            return FileResponse(path, media_type=media_type)
        data = await asyncio.to_thread(outputs.get, f"images/{name}")  # another machine's store
        if data is None:
            raise APIError(404, f"no image {name!r}", code="not_found")
        return Response(data, media_type=media_type)
