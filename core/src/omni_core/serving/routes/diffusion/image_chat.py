"""Image models' answers to ``POST /v1/chat/completions``: vLLM-Omni's main path for
text-to-image and image editing, with OpenAI's chat shapes (the route is
:mod:`omni_core.serving.routes.chat.completions`; it hands image models' bodies here).

The prompt is the text of the user messages (all of them, in order, as vLLM-Omni reads them)
and their ``image_url`` parts (data URLs; http(s) only for ``--allowed-url-hosts``) are the
input images; a system or developer message is accepted and reported in
``X-Omni-Ignored-Fields`` (vLLM-Omni drops it too, so the image is what it would make), an
assistant or tool message is a 400 (earlier answers cannot be fed to an image model). The
answer is a ``chat.completion`` whose assistant message ``content`` is a list of ``image_url``
parts holding data-URL images; ``stream: true`` sends ``chat.completion.chunk`` events, the
image in the last one, then ``[DONE]``. The request runs through the same request path and
engine as ``/v1/images``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from omni_core.runtime.jobs import Job
from omni_core.serving import compat, media, stage_metrics, streams
from omni_core.serving.errors import from_exception, invalid
from omni_core.serving.http import await_job, diffusion_fields, request_id, validate
from omni_core.serving.models import ServedModel, pick
from omni_core.serving.schemas import ChatBody
from omni_core.serving.state import ServerState

#: The output modalities this route answers with today.
SERVED_MODALITIES = ("image",)
#: The diffusion knobs of a chat body (the prompt comes from ``messages``).
_KNOBS = ("size", "negative_prompt", "seed", "num_inference_steps", "guidance_scale", "lora")


def _parts(content: Any, where: str) -> tuple[list[str], list[str]]:
    """A message's content -> (texts, image URLs); vLLM-Omni's ``{"text"}``/``{"image"}``
    shorthand parts are read too."""
    if isinstance(content, str):
        return [content], []
    if not isinstance(content, list):
        raise invalid(f"{where}.content: expected a string or a list of parts", where)
    texts, images = [], []
    for i, part in enumerate(content):
        at = f"{where}.content[{i}]"
        if not isinstance(part, dict):
            raise invalid(f"{at}: expected an object", at)
        kind = part.get("type") or next((k for k in ("text", "image") if k in part), "")
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise invalid(f"{at}.text: expected a string", at)
            texts.append(part["text"])
        elif kind == "image_url":
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            if not isinstance(url, str) or not url:
                raise invalid(f"{at}.image_url: expected {{'url': URL}}", at)
            images.append(url)
        elif kind == "image":
            data = part.get("image")
            if not isinstance(data, str) or not data:
                raise invalid(f"{at}.image: expected base64 image data or a URL", at)
            images.append(data if ":" in data[:12] else f"data:image/png;base64,{data}")
        else:
            raise invalid(
                f"{at}: part type {kind!r} is not supported (text, image_url)",
                at,
                code="unsupported_parameter",
            )
    return texts, images


def _prompt(body: ChatBody, request: Request) -> tuple[str, list[str]]:
    """The prompt and input images of the conversation, as vLLM-Omni reads them: the texts of
    every user message in order (joined by spaces) and their images in order. System and
    developer messages are what chat clients add by default; vLLM-Omni drops them, so they are
    accepted, not used, and reported (``X-Omni-Ignored-Fields: messages[i]``). Assistant and
    tool turns are a 400 naming the message, never dropped."""
    texts: list[str] = []
    images: list[str] = []
    for i, message in enumerate(body.messages):
        role = message.get("role")
        if not isinstance(role, str):
            raise invalid(f"messages[{i}].role: expected a string", f"messages[{i}]")
        if role in ("system", "developer"):
            _parts(message.get("content"), f"messages[{i}]")  # still well-formed
            compat.ignore(request, f"messages[{i}]")
            continue
        if role != "user":
            raise invalid(
                f"messages[{i}]: a {role!r} message cannot be used by an image model, which "
                "reads the prompt and input images from user messages only; send the "
                "instructions in a user message",
                f"messages[{i}]",
                code="unsupported_parameter",
            )
        found, urls = _parts(message.get("content"), f"messages[{i}]")
        texts += found
        images += urls
    prompt = " ".join(t.strip() for t in texts if t.strip())
    if not prompt:
        raise invalid("messages: the prompt text is empty", "messages")
    return prompt, images


async def answer(
    state: ServerState, served: ServedModel, data: dict[str, Any], request: Request
) -> Response:
    """Answer one chat request of an image model (the body is read, the model picked)."""
    config = state.config
    modalities = data.get("modalities")
    if modalities is not None and (
        not isinstance(modalities, list) or any(m not in SERVED_MODALITIES for m in modalities)
    ):
        raise invalid(
            f"modalities={modalities!r}: the model {served.id!r} answers chat with images "
            "only (text and audio answers need a chat model)",
            "modalities",
            code="unsupported_parameter",
        )
    data = compat.translate("chat", data, request, served.pipeline)
    body = validate(ChatBody, data)
    prompt, urls = _prompt(body, request)
    if len(urls) > config.max_images:
        raise invalid(f"messages: at most {config.max_images} images", "messages")
    blobs = []
    for i, url in enumerate(urls):
        blob = await media.fetch_url(
            url,
            param=f"image_url[{i}]",
            allowed_hosts=state.allowed_hosts,
            max_bytes=config.max_upload_bytes,
            deadline_s=config.url_fetch_timeout_s,
        )
        blobs.append((f"image_url[{i}]", blob))
    images = await asyncio.to_thread(media.decode_images, blobs, config.max_upload_pixels)
    if images:
        served = pick(state.models, served.id, "image", task="i2i")
    per_choice = body.num_outputs_per_prompt
    # vLLM-Omni's per-output sizes: one request per size, each making one image per choice
    sizes = body.sizes()
    knobs = SimpleNamespace(**{n: getattr(body, n) for n in _KNOBS}, prompt=prompt)
    rid = request_id(request)
    gens = []
    for i, size in enumerate(sizes):
        knobs.size = size or body.size
        fields = {
            **diffusion_fields(knobs),
            "num_outputs": body.n * (per_choice if size is None else 1),
            "images": images,
        }
        at = rid if len(sizes) == 1 else f"{rid}-{i}"
        gens.append(state.build_request(served, fields, extras=body.extras(), request_id=at))
    jobs = [state.submit(served, Job(gen)) for gen in gens]
    cid = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    head = {"id": cid, "created": created, "model": served.id}
    headers = compat.headers(request)

    def merged(results: list[Any]) -> list[Any]:
        """Each choice's images in order: one job's, or one per per-output size."""
        if len(results) == 1:
            return list(results[0].images or [])
        return [r.images[i] for i in range(body.n) for r in results]

    async def choices(results: list[Any]) -> list[list[dict[str, Any]]]:
        blobs = await asyncio.to_thread(
            lambda: [media.encode_image(im, "png") for im in merged(results)]
        )
        parts = [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{media.b64(b)}"}}
            for b in blobs
        ]
        return [parts[i * per_choice : (i + 1) * per_choice] for i in range(body.n)]

    reported = stage_metrics.requested(request, config)

    if not body.stream:
        try:
            results = [await await_job(served, job, request) for job in jobs]
        except BaseException:
            for job in jobs:  # one size failed: the others are not wanted any more
                if not job.future.done() and served.engine is not None:
                    served.engine.cancel(job, "another size of this request failed")
            raise
        t0 = time.perf_counter()
        contents = await choices(results)
        payload = {
            **head,
            "object": "chat.completion",
            "choices": [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
                for i, content in enumerate(contents)
            ],
            "usage": usage,
        }
        if reported:  # vLLM-Omni's benchmark reads metrics.stage_durations / .peak_memory_mb
            payload["metrics"] = stage_metrics.metrics(results[0], time.perf_counter() - t0)
        return JSONResponse(payload, headers=headers)

    include_usage = bool((body.stream_options or {}).get("include_usage"))

    def event(choices_: list[dict[str, Any]], **extra: Any) -> bytes:
        chunk = {**head, "object": "chat.completion.chunk", "choices": choices_, **extra}
        return f"data: {json.dumps(chunk)}\n\n".encode()

    async def stream() -> AsyncIterator[bytes]:
        engine = served.engine
        try:
            yield event(
                [
                    {"index": i, "delta": {"role": "assistant"}, "finish_reason": None}
                    for i in range(body.n)
                ]
            )
            results = [
                await asyncio.wrap_future(job.future) for job in jobs
            ]  # raising: an error event
            t0 = time.perf_counter()
            contents = await choices(results)
            ran = (
                {"metrics": stage_metrics.metrics(results[0], time.perf_counter() - t0)}
                if reported
                else {}
            )
            for i, content in enumerate(contents):
                delta = {"content": content}
                yield event([{"index": i, "delta": delta, "finish_reason": "stop"}], **ran)
            if include_usage:
                yield event([], usage=usage)
            yield b"data: [DONE]\n\n"
        finally:
            for job in jobs:
                if not job.future.done() and engine is not None:
                    engine.cancel(job, "the client disconnected")

    def error_event(exc: BaseException) -> bytes:
        return f"data: {json.dumps(from_exception(exc).body())}\n\n".encode()

    return StreamingResponse(
        streams.end_with_error_event(stream(), rid, error_event),
        media_type="text/event-stream",
        headers={**headers, "Cache-Control": "no-cache"},
    )
