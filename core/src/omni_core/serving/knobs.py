"""What a client may set on one served model, beyond the OpenAI fields every model of its
modality takes: its own extras (the JSON Schema of ``pipeline.extras_model``), the defaults of
a request known to run here (its warm-up request, after the server's ``--warmup-request``),
its LoRA adapters, voices (and whether it clones them), chat answer modalities and the server's
limits. ``GET /v1/models/{id}/knobs`` publishes it (the playground builds its form from it).

Everything is read from the contract (``Pipeline`` members, the spec's tasks), so nothing here
knows a model family.
"""

from __future__ import annotations

from typing import Any

from omni_core.chat.pipeline import ChatPipeline
from omni_core.contract.requests import warmup_request
from omni_core.serving.config import ServerConfig
from omni_core.serving.models import ServedModel
from omni_core.speech.pipeline import SpeechPipeline

#: The OpenAI-shaped routes of each modality and the shared fields each takes.
ROUTES: dict[str, dict[str, tuple[str, ...]]] = {
    "image": {
        "/v1/images/generations": (
            "prompt", "negative_prompt", "size", "n", "seed", "num_inference_steps",
            "guidance_scale", "lora",
        ),
        "/v1/images/edits": (
            "image", "prompt", "negative_prompt", "size", "n", "seed", "num_inference_steps",
            "guidance_scale", "lora",
        ),
    },
    "video": {
        "/v1/videos": (
            "prompt", "negative_prompt", "size", "num_frames", "seconds", "seed",
            "num_inference_steps", "guidance_scale", "lora", "input_reference",
        ),
    },
    "speech": {
        "/v1/audio/speech": (
            "input", "voice", "language", "speed", "seed", "response_format", "stream_format",
        ),
    },
    "chat": {
        "/v1/chat/completions": ("messages", "modalities", "audio", "stream", "max_tokens",
                                 "temperature", "top_p", "top_k", "seed"),
    },
}  # fmt: skip
#: Tasks that take input images (edits) and those that make something from text alone.
EDIT_TASKS = frozenset({"i2i"})
TEXT_TASKS = frozenset({"t2i"})


def _routes(served: ServedModel) -> dict[str, tuple[str, ...]]:
    routes = dict(ROUTES.get(served.modality or "", {}))
    if served.modality == "image":
        tasks = set(served.tasks)
        if not tasks & TEXT_TASKS:
            routes.pop("/v1/images/generations")
        if not tasks & EDIT_TASKS:
            routes.pop("/v1/images/edits")
    return routes


def _defaults(served: ServedModel, config: ServerConfig) -> dict[str, Any]:
    """The shared fields of the warm-up request as a client sends them (``size`` "WxH", the
    video's ``fps``): values that run on this server. Empty when it cannot be built."""
    try:
        request = warmup_request(served.pipeline, served.warmup_fields(config))
    except Exception:  # noqa: BLE001 - defaults are a convenience: a model without them is fine
        return {}
    out: dict[str, Any] = {}
    if request.width and request.height and served.modality in ("image", "video"):
        out["size"] = f"{request.width}x{request.height}"
    for name in ("num_inference_steps", "guidance_scale", "num_frames"):
        value = getattr(request, name)
        if value is not None:
            out[name] = value
    fps = served.pipeline.output_fps(request)
    if fps:
        out["fps"] = fps
    return out


def _extras(served: ServedModel) -> dict[str, Any]:
    """The JSON Schema of the model's own request fields (top-level body fields)."""
    schema = served.pipeline.extras_model.model_json_schema()
    return {
        "properties": schema.get("properties", {}),
        "required": schema.get("required", []),
        "$defs": schema.get("$defs", {}),
    }


def describe(served: ServedModel, config: ServerConfig) -> dict[str, Any]:
    """The knobs of one ready model (see the module docstring)."""
    pipeline = served.pipeline
    adapters = pipeline.adapters.describe() if pipeline.adapters is not None else None
    out: dict[str, Any] = {
        "id": served.id,
        "object": "model.knobs",
        "modality": served.modality,
        "tasks": list(served.tasks),
        "routes": {path: list(fields) for path, fields in _routes(served).items()},
        "defaults": _defaults(served, config),
        "extras": _extras(served),
        "lora": adapters,
        "limits": {
            "max_steps": config.max_steps,
            "max_pixels": config.max_pixels,
            "max_frames": config.max_frames,
            "max_outputs": config.max_outputs,
            "max_images": config.max_images,
            "max_upload_mb": config.max_upload_mb,
        },
    }
    if isinstance(pipeline, SpeechPipeline):
        out["voices"] = [_voice(v) for v in pipeline.voices()]
        out["clones_voices"] = bool(pipeline.clones_voices)
        out["streaming"] = bool(pipeline.spec and pipeline.spec.capabilities.streaming)
    if isinstance(pipeline, ChatPipeline):
        out["modalities"] = list(pipeline.output_modalities)
        spoken = "audio" in pipeline.output_modalities
        out["voices"] = [_voice(v) for v in pipeline.voices()] if spoken else []
    return out


def _voice(voice: Any) -> dict[str, Any]:
    return {"id": voice.id, "name": voice.name or voice.id, "language": voice.language}
