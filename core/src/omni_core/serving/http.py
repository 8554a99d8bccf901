"""Reading requests at the HTTP edge, with limits: bodies, JSON, multipart forms and uploads;
validation of the body models; waiting for a job while watching for the client to leave.

Routes parse their bodies by hand (not through FastAPI's body injection) so that size limits
hold before anything is buffered and every problem becomes an OpenAI-style 4xx.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException
from starlette.requests import ClientDisconnect

from omni_core.runtime.jobs import Job
from omni_core.serving import media
from omni_core.serving.config import ServerConfig
from omni_core.serving.errors import (
    APIError,
    ClientGone,
    from_exception,
    from_validation_error,
    invalid,
)
from omni_core.serving.models import ServedModel
from omni_core.serving.schemas import parse_size

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.types import GenerationRequest
    from omni_core.serving.state import ServerState
    from omni_core.serving.timings import RequestMarks

FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")

Body = TypeVar("Body", bound=BaseModel)


def _too_large(request: Request, limit: int) -> None:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise APIError(
            413,
            f"request body of {declared} bytes exceeds the limit of {limit}",
            code="request_too_large",
        )


async def read_body(request: Request, limit: int) -> bytes:
    _too_large(request, limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise APIError(
                    413,
                    f"request body exceeds the limit of {limit} bytes",
                    code="request_too_large",
                )
            chunks.append(chunk)
    except ClientDisconnect:
        raise _gone() from None
    return b"".join(chunks)


def _gone() -> APIError:
    """The client left (or was cut off by the body deadline) before its body ended: nobody is
    left to read the answer, but the route stops here without a traceback."""
    return APIError(
        400,
        "the connection closed before the whole request body arrived",
        code="incomplete_body",
        headers={"Connection": "close"},
    )


#: Deepest nesting of a JSON body (objects and arrays); real bodies use 3 or 4 levels.
MAX_JSON_DEPTH = 32
#: Most digits of an integer in a JSON body (``seed`` < 2**63 has 19).
MAX_INT_DIGITS = 40


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise APIError(
            400,
            f"malformed JSON body: an integer of {len(text)} digits (at most {MAX_INT_DIGITS})",
            code="invalid_json",
        )
    return int(text)


def _no_constant(name: str) -> Any:
    raise APIError(400, f"malformed JSON body: {name} is not JSON", code="invalid_json")


def check_json_content_type(request: Request) -> None:
    """JSON routes take ``application/json`` only: a ``text/plain`` or form POST is what a web
    page can send cross-origin without a preflight, so it is refused (415), never parsed."""
    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype == "application/json" or (
        ctype.startswith("application/") and ctype.endswith("+json")
    ):
        return
    raise APIError(
        415,
        f"expected Content-Type: application/json, got {ctype or 'none'}",
        code="unsupported_media_type",
    )


def check_text(value: Any, param: str | None = None) -> None:
    """Refuse NUL characters anywhere in a body (no model or file format takes them) and
    nesting deeper than :data:`MAX_JSON_DEPTH`; iterative, so no input can recurse."""
    stack: list[tuple[Any, str | None, int]] = [(value, param, 0)]
    while stack:
        item, where, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise APIError(
                400, f"the body is nested deeper than {MAX_JSON_DEPTH} levels", code="invalid_json"
            )
        if isinstance(item, str):
            if "\x00" in item:
                raise invalid(f"{where or 'body'}: NUL characters are not allowed", where)
        elif isinstance(item, dict):
            for key, sub in item.items():
                stack.append((key, where, depth + 1))
                stack.append((sub, where or str(key), depth + 1))
        elif isinstance(item, list):
            stack.extend((sub, where, depth + 1) for sub in item)


async def read_json(request: Request, config: ServerConfig) -> dict[str, Any]:
    """The JSON object of the body: strict Content-Type, bounded size, depth and numbers."""
    check_json_content_type(request)
    body = await read_body(request, config.max_body_bytes)
    try:
        data = json.loads(body, parse_int=_parse_int, parse_constant=_no_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise APIError(400, f"malformed JSON body: {exc}", code="invalid_json") from None
    except RecursionError:
        raise APIError(
            400, f"the body is nested deeper than {MAX_JSON_DEPTH} levels", code="invalid_json"
        ) from None
    except ValueError as exc:  # e.g. Python's own int-size guard
        raise APIError(400, f"malformed JSON body: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise APIError(400, "the JSON body must be an object", code="invalid_json")
    check_text(data)
    return data


async def read_form(request: Request, config: ServerConfig, *, images: bool = True) -> FormData:
    """The multipart (or urlencoded) form, bounded in size and file count; with ``images``
    (every file part of this API is an image) each file's header is checked before anything is
    decoded: png, jpeg or webp only, and at most ``max_upload_pixels`` decoded pixels in all."""
    _too_large(request, config.max_body_bytes)
    try:
        form = await request.form(
            max_files=config.max_images,
            max_fields=200,
            max_part_size=config.max_upload_bytes,
        )
    except MultiPartException as exc:
        message = str(exc.message)
        status = 413 if "exceed" in message.lower() or "too" in message.lower() else 400
        raise APIError(
            status,
            f"invalid multipart body: {message}",
            code="request_too_large" if status == 413 else "invalid_multipart",
        ) from None
    except ClientDisconnect:
        raise _gone() from None
    except (AssertionError, ValueError, UnicodeDecodeError) as exc:
        raise APIError(400, f"invalid multipart body: {exc}", code="invalid_multipart") from None
    if images:
        try:
            await asyncio.to_thread(_check_image_headers, form, config)
        except APIError:
            await form.close()
            raise
    return form


def _check_image_headers(form: FormData, config: ServerConfig) -> None:
    uploads = [(k, v) for k, v in form.multi_items() if isinstance(v, UploadFile)]
    images = []
    for i, (key, upload) in enumerate(uploads):
        base = key.removesuffix("[]")
        param = base if len(uploads) == 1 else f"{base}[{i}]"
        if upload.size is not None and upload.size > config.max_upload_bytes:
            continue  # too large: upload_bytes answers 413 naming the limit
        upload.file.seek(0)
        if not upload.file.read(1):
            upload.file.seek(0)
            continue  # empty: the decoder names it
        upload.file.seek(0)
        images.append((param, *media.image_info(upload.file, param)))
        upload.file.seek(0)
    media.fit_pixels(images, config.max_upload_pixels)  # 413 when even reduced JPEGs do not


async def upload_bytes(upload: UploadFile, param: str, config: ServerConfig) -> bytes:
    limit = config.max_upload_bytes
    data = await upload.read(limit + 1)
    if len(data) > limit:
        raise APIError(
            413,
            f"{param}: file larger than {config.max_upload_mb:g} MB",
            param=param,
            code="file_too_large",
        )
    return data


def form_files(form: FormData, accepted: Iterable[str]) -> dict[str, list[UploadFile]]:
    """The file parts by key; a file under any other key is a 400 naming it (never dropped)."""
    accepted = tuple(accepted)
    files: dict[str, list[UploadFile]] = {}
    for key, value in form.multi_items():
        if isinstance(value, UploadFile):
            files.setdefault(key, []).append(value)
    unknown = sorted(k for k in files if k not in accepted)
    if unknown:
        raise invalid(
            f"unknown file part{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)} "
            f"(this endpoint reads files only from {' or '.join(accepted)})",
            unknown[0],
            code="unknown_parameter",
        )
    return files


def form_fields(form: FormData, skip: Iterable[str] = ()) -> dict[str, Any]:
    """The text parts of a form (each at most once), minus ``skip``."""
    skip = set(skip)
    fields: dict[str, Any] = {}
    for key, value in form.multi_items():
        if key in skip or isinstance(value, UploadFile):
            continue
        if key in fields:
            raise invalid(f"{key}: given more than once", key, code="duplicate_parameter")
        check_text(value, key)
        fields[key] = value
    return fields


def validate(model: type[Body], data: dict[str, Any]) -> Body:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


def diffusion_fields(body: Any) -> dict[str, Any]:
    """The shared request fields of an image or video body (``size`` -> width and height)."""
    width, height = parse_size(body.size)
    fields: dict[str, Any] = {"prompt": body.prompt}
    for name in ("negative_prompt", "seed", "num_inference_steps", "guidance_scale", "lora"):
        value = getattr(body, name)
        if value is not None:
            fields[name] = value
    if width is not None:
        fields["width"], fields["height"] = width, height
    return fields


def request_id(request: Request) -> str:
    """The client's ``x-request-id`` when it is sane, else a new one; echoed in the response."""
    given = request.headers.get("x-request-id", "")
    rid = given if re.fullmatch(r"[A-Za-z0-9._\-]{1,64}", given) else uuid.uuid4().hex
    request.state.request_id = rid
    return rid


async def await_job(served: ServedModel, job: Job, request: Request | None = None) -> Any:
    """Wait for a job; a client that disconnects first cancels it (at the next step) and the
    route ends with :class:`~omni_core.serving.errors.ClientGone` (quietly: not an error)."""
    future = asyncio.wrap_future(job.future)
    watcher = asyncio.ensure_future(_disconnected(request)) if request is not None else None
    try:
        if watcher is not None:
            await asyncio.wait({future, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not future.done():
                future.add_done_callback(_retrieve)  # its outcome is nobody's now
                if served.engine is not None:
                    served.engine.cancel(job, "the client disconnected")
                raise ClientGone(f"the client disconnected; request {job.id} cancelled")
        return await future
    except asyncio.CancelledError:
        if served.engine is not None:
            served.engine.cancel(job, "the client disconnected")
        raise
    except ClientGone:
        raise
    except Exception as exc:  # noqa: BLE001 - mapped to its HTTP status
        raise from_exception(exc) from None
    finally:
        if watcher is not None:
            watcher.cancel()


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a finished future's exception as seen (asyncio warns of one nobody retrieved)."""
    if not future.cancelled():
        future.exception()


async def submit_streaming(
    state: ServerState,
    served: ServedModel,
    request: GenerationRequest,
    marks: RequestMarks | None = None,
) -> tuple[Job, asyncio.Queue[Any], Any]:
    """Submit a job whose pieces (speech chunks, chat deltas) are put on a queue as they are
    made, then its finished future; returns the job, the queue and its first item (so an error
    before any output is still an HTTP status). A client gone meanwhile cancels the job.
    ``marks`` (``--timings-log``) gets the submit, start, first-chunk and back-on-loop times."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def on_chunk(item: Any) -> None:
        if marks is not None:
            marks.mark("chunk_made")
        loop.call_soon_threadsafe(queue.put_nowait, item)

    job = Job(request, on_chunk=on_chunk)
    job.future.add_done_callback(lambda fut: loop.call_soon_threadsafe(queue.put_nowait, fut))
    state.submit(served, job)
    if marks is not None:
        marks.mark("submitted")
    try:
        first = await queue.get()
    except asyncio.CancelledError:
        if served.engine is not None:
            served.engine.cancel(job, "the client disconnected")
        raise
    if marks is not None:
        marks.mark("chunk_on_loop")
        if job.started_at is not None:
            marks.mark("started", job.started_at)
    return job, queue, first


async def _disconnected(request: Request | None) -> None:
    """Returns when the client goes away (the body was read already: only disconnects come)."""
    if request is None:
        return
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
