"""``/v1/videos``: create a job (JSON, or multipart with an ``input_reference`` image), list,
retrieve, download the MP4, cancel or delete; ``/v1/videos/sync`` answers with the MP4 itself.
Bodies pass through :func:`omni_core.serving.compat.translate` (vLLM-Omni's fields); the job
state machine is :mod:`omni_core.serving.jobs`."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response

from omni_core.contract.requests import clip_seconds, make_request
from omni_core.contract.types import GenerationRequest
from omni_core.serving import compat, media, stage_metrics
from omni_core.serving.errors import APIError, ClientGone, invalid
from omni_core.serving.http import (
    FORM_TYPES,
    await_job,
    diffusion_fields,
    form_fields,
    form_files,
    read_form,
    read_json,
    upload_bytes,
    validate,
)
from omni_core.serving.models import ServedModel, pick
from omni_core.serving.openapi import body_spec
from omni_core.serving.schemas import VideoBody
from omni_core.serving.state import ServerState
from omni_core.serving.stores import TERMINAL, JobRecord

#: The longest clip ``seconds`` may ask for (the pipeline's own frame limit applies too).
MAX_SECONDS = 60.0


def _seconds(body: VideoBody) -> float | None:
    if body.seconds is None:
        return None
    try:
        seconds = float(body.seconds)
    except ValueError:
        raise invalid("seconds: expected a number", "seconds") from None
    if not 0 < seconds <= MAX_SECONDS:
        raise invalid(f"seconds: must be in (0, {MAX_SECONDS:g}]", "seconds")
    return seconds


def _png(image: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def add_routes(router: APIRouter, state: ServerState) -> None:
    config = state.config
    keep_s = config.storage.retention.max_age_s  # a finished job's expires_at

    def record_or_404(video_id: str) -> JobRecord:
        assert state.store is not None
        record = state.store.get(video_id)
        if record is None:
            raise APIError(
                404, f"no video job {video_id!r}", param="video_id", code="video_not_found"
            )
        return record

    async def read_video_body(
        request: Request,
    ) -> tuple[ServedModel, VideoBody, bytes | None]:
        """The body, and the bytes of its input image (uploaded, or a URL fetched if allowed)."""
        ctype = request.headers.get("content-type", "")
        image_bytes: bytes | None = None
        if ctype.startswith(FORM_TYPES):
            form = await read_form(request, config)
            try:
                uploads = form_files(form, ("input_reference",)).get("input_reference", [])
                if len(uploads) > 1:
                    raise invalid("input_reference: one image only", "input_reference")
                if uploads:
                    image_bytes = await upload_bytes(uploads[0], "input_reference", config)
                fields = form_fields(form)
            finally:
                await form.close()
            if image_bytes is not None and "input_reference" in fields:
                raise invalid(
                    "input_reference: given both as a file and as a text field",
                    "input_reference",
                    code="duplicate_parameter",
                )
        elif ctype.startswith("application/json") or not ctype:
            fields = await read_json(request, config)
        else:
            raise APIError(
                415,
                "POST /v1/videos takes application/json or multipart/form-data",
                code="unsupported_media_type",
            )
        served = pick(state.models, compat.model_of(fields), "video")
        fields = compat.translate("videos", fields, request, served.pipeline)
        ref = fields.get("input_reference")
        if isinstance(ref, str) and ref.lstrip().startswith("{"):  # vLLM-Omni's JSON text
            try:
                fields["input_reference"] = json.loads(ref)
            except json.JSONDecodeError:
                raise invalid("input_reference: malformed JSON", "input_reference") from None
        if "fps" in fields and "fps" not in served.pipeline.extras_model.model_fields:
            # vLLM-Omni sends fps (default 24): fine only when it is what the model makes.
            probe = make_request({"prompt": "fps"}, extras_at=None)
            actual = served.pipeline.output_fps(probe)
            compat.pipeline_field(served.pipeline, "fps", fields.pop("fps"), actual, {}, request)
        body = validate(VideoBody, fields)
        ref = body.input_reference
        if isinstance(ref, dict) and "image_url" not in ref and "url" in ref:
            ref = {"image_url": ref["url"]}
        if image_bytes is None and ref is not None:
            if isinstance(ref, dict):
                ref = ref.get("image_url")
                if not isinstance(ref, str):
                    raise invalid("input_reference: expected {'image_url': URL}", "input_reference")
            image_bytes = await media.fetch_url(
                ref,
                param="input_reference",
                allowed_hosts=state.allowed_hosts,
                max_bytes=config.max_upload_bytes,
                deadline_s=config.url_fetch_timeout_s,
            )
        return served, body, image_bytes

    async def prepare(
        request: Request, job_id: str
    ) -> tuple[ServedModel, VideoBody, dict[str, Any], list[Any], float | None, GenerationRequest]:
        """The body -> its validated request (frames fitted to the model, and said so)."""
        served, body, image_bytes = await read_video_body(request)
        seconds = _seconds(body)
        fields = diffusion_fields(body)
        if body.num_frames is not None:
            fields["num_frames"] = body.num_frames
        images = []
        if image_bytes is not None:
            blobs = [("input_reference", image_bytes)]
            images += await asyncio.to_thread(media.decode_images, blobs, config.max_upload_pixels)
        extras = body.extras()
        if seconds is None and "num_frames" in fields:
            trial = {**fields, "images": images}
            fields["num_frames"] = compat.fit_frames(served.pipeline, trial, extras, request)
        gen = state.build_request(
            served, {**fields, "images": images}, extras=extras, request_id=job_id, seconds=seconds
        )
        return served, body, fields, images, seconds, gen

    video_body = body_spec(  # POST /videos and /videos/sync take the same body
        VideoBody, multipart=True, json_body=True, files={"input_reference": False},
        model_ids=state.models,
    )  # fmt: skip

    @router.post(
        "/videos",
        summary="Create a video job",
        openapi_extra=video_body,
    )
    async def create_video(request: Request) -> JSONResponse:
        job_id = f"video_{uuid.uuid4().hex}"
        request.state.request_id = job_id
        record = await accept(request, job_id)
        return JSONResponse(record.as_api(keep_s), headers=compat.headers(request))

    async def accept(request: Request, job_id: str) -> JobRecord:
        """Validate and persist a video job (the same for ``/videos`` and its sync form): its
        record, input image and request are in the stores before any server runs it."""
        served, body, fields, images, seconds, gen = await prepare(request, job_id)
        extras = body.extras()
        outputs = state.outputs
        assert outputs is not None
        input_path = None
        if images:
            blob = await asyncio.to_thread(_png, images[0])
            input_path = await asyncio.to_thread(outputs.put, f"inputs/{job_id}.png", blob)
        if seconds is not None:  # persisted as frames: a restart rebuilds the same request
            fields["num_frames"] = gen.num_frames
        clip = clip_seconds(served.pipeline, gen)
        try:
            record = await asyncio.to_thread(
                state.jobs.accept,
                served,
                gen,
                job_id=job_id,
                model=served.id,
                prompt=body.prompt,
                size=f"{gen.width}x{gen.height}" if gen.width and gen.height else (body.size or ""),
                seconds=f"{clip:g}" if clip is not None else (body.seconds or ""),
                request={**fields, "extras": extras},
                input_path=input_path,
            )
        except APIError:
            if input_path:
                outputs.delete(input_path)
            raise
        return record

    @router.post(
        "/videos/sync",
        summary="Generate a video and answer with the MP4 (vLLM-Omni's synchronous path)",
        response_class=Response,
        openapi_extra=video_body,
    )
    async def create_video_sync(request: Request) -> Response:
        """A video job like ``POST /videos`` (persisted, listed, its id in ``X-Omni-Video-Id``,
        run by whichever server has room) whose answer is the finished MP4; a client that
        leaves cancels it."""
        job_id = f"video_{uuid.uuid4().hex}"
        request.state.request_id = job_id
        try:
            accepted = await accept(request, job_id)
        except APIError as exc:  # vLLM-Omni's endpoint: its statuses
            raise compat.vllm_omni_status(exc) from None
        store, outputs = state.store, state.outputs
        assert store is not None and outputs is not None
        job, served = state.jobs.get(job_id), state.models.get(accepted.model)
        if job is not None and served is not None:
            # Running here: wait on the engine (a disconnect cancels it), not on the store.
            try:
                await await_job(served, job, request)
            except APIError:
                pass  # the failure is recorded in the store and answered below
        # Then (or when another server runs it) read the store until the job is over; looks
        # back off to 0.5 s, so a long job elsewhere costs two reads a second.
        delay = 0.05
        record = await asyncio.to_thread(store.get, job_id)
        while record is not None and record.status not in TERMINAL:
            if await request.is_disconnected():
                await cancel(record)
                raise ClientGone(f"the client disconnected; video job {job_id} cancelled")
            await asyncio.sleep(delay)
            delay = min(0.5, delay * 2)
            record = await asyncio.to_thread(store.get, job_id)
        if record is None or record.status != "completed" or not record.output_path:
            error = (record.error if record is not None else None) or {}
            raise APIError(
                500,
                f"the video job failed: {error.get('message', 'deleted meanwhile')}",
                type="server_error",
                code=error.get("code") or "generation_failed",
            )
        data = await asyncio.to_thread(outputs.get, record.output_path)
        if data is None:
            raise APIError(
                404,
                f"the content of video {job_id} is missing from the output store",
                code="video_content_missing",
            )
        headers = {**compat.headers(request), "X-Omni-Video-Id": job_id}
        if record.metrics and stage_metrics.requested(request, config):
            headers["X-Omni-Metrics"] = json.dumps(record.metrics)
        return Response(data, media_type="video/mp4", headers=headers)

    async def cancel(record: JobRecord) -> None:
        """Cancel a queued or running job: here through the engine, else in the store (the
        server running it stops at its next lease renewal)."""
        video_id = record.id
        job = state.jobs.get(video_id)
        served = state.models.get(record.model)
        if job is not None and served is not None and served.engine is not None:
            served.engine.cancel(job, "cancelled by the client")
            try:
                await asyncio.wait_for(asyncio.wrap_future(job.future), timeout=60)
            except Exception:  # noqa: BLE001 - the job's own outcome is recorded elsewhere
                pass
        else:
            await asyncio.to_thread(
                state.jobs.finalize,
                video_id,
                "cancelled",
                mine=False,
                error={"code": "cancelled", "message": "cancelled by the client"},
            )

    @router.get("/videos", summary="List video jobs")
    async def list_videos(
        request: Request,
        limit: int = Query(20, ge=1, le=100),
        order: Literal["asc", "desc"] = "desc",
        after: str | None = Query(None, max_length=100),
    ) -> dict[str, Any]:
        assert state.store is not None
        records = state.store.list(order=order, limit=limit + 1, after=after)
        has_more = len(records) > limit
        reported = stage_metrics.requested(request, config)
        data = [r.as_api(keep_s, timings=reported) for r in records[:limit]]
        return {
            "object": "list",
            "data": data,
            "has_more": has_more,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }

    @router.get("/videos/{video_id}", summary="Get a video job")
    async def get_video(video_id: str, request: Request) -> dict[str, Any]:
        return record_or_404(video_id).as_api(
            keep_s, timings=stage_metrics.requested(request, config)
        )

    @router.get(
        "/videos/{video_id}/content",
        summary="Download the MP4 of a completed job",
        response_class=FileResponse,
    )
    async def video_content(
        video_id: str, variant: str = Query("video", max_length=20)
    ) -> Response:
        record = record_or_404(video_id)
        if variant != "video":
            raise invalid(f"variant: only 'video' is available, not {variant!r}", "variant")
        if record.status != "completed" or not record.output_path:
            raise APIError(
                409,
                f"video {video_id} is {record.status}, not completed",
                param="video_id",
                code="video_not_ready",
            )
        outputs = state.outputs
        assert outputs is not None
        key = record.output_path
        path = await asyncio.to_thread(outputs.local_path, key)
        if path is not None:
            return FileResponse(path, media_type="video/mp4", filename=f"{video_id}.mp4")
        data = await asyncio.to_thread(outputs.get, key)  # another machine's store (S3)
        if data is None:
            raise APIError(
                404,
                f"the content of video {video_id} is missing from the output store",
                code="video_content_missing",
            )
        disposition = f'attachment; filename="{video_id}.mp4"'
        return Response(data, media_type="video/mp4", headers={"Content-Disposition": disposition})

    @router.delete("/videos/{video_id}", summary="Cancel a queued or running job, or delete one")
    async def delete_video(video_id: str) -> dict[str, Any]:
        record = record_or_404(video_id)
        assert state.store is not None
        if record.status in TERMINAL:
            await asyncio.to_thread(state.jobs.delete, video_id)
            return {"id": video_id, "object": "video.deleted", "deleted": True}
        await cancel(record)
        current = state.store.get(video_id)
        return {
            "id": video_id,
            "object": "video.deleted",
            "deleted": False,
            "status": current.status if current else "cancelled",
        }
