"""The generic diffusers adapter: any diffusers pipeline runs through ``Omni(...)``.

Registered by :mod:`omni_core.builtins.diffusers_adapter` (a tiny hook module, so that
``omni list-plugins`` never imports this one) as a *fallback* pipeline
(``architectures=("*",)``): it serves a checkpoint with a ``model_index.json`` only when no
first-class plugin claims its ``_class_name``, or when asked for by name
(``pipeline="diffusers"``).

It is honest about what it is: a :class:`StagedPipeline` with exactly one step. ``prepare``
validates and records the request; the single ``step`` calls the diffusers pipeline's own
``__call__`` (its loop, its scheduler, seeded with ``torch.Generator("cpu").manual_seed(seed)``
so outputs equal diffusers'); ``decode`` converts the output. There is no step batching and no
per-step progress from the engine's point of view. What omni adds: the attention of every
model component goes through omni's dispatcher where the model calls diffusers'
``dispatch_attention_fn`` (:mod:`omni_core.diffusion.attention_routing`), loading is
safetensors-only without remote code, and bad arguments are rejected before any compute.
"""

from __future__ import annotations

import inspect
import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from omni_core.contract.errors import InvalidRequestError, ModelNotFoundError
from omni_core.contract.pipeline import DenoiseState, PipelineOptions, StagedPipeline
from omni_core.contract.types import GenerationRequest, GenerationResult

#: Arguments omni sets itself; a request may not pass them as extras.
RESERVED = frozenset(
    {
        "generator",
        "output_type",
        "return_dict",
        "latents",
        "callback",
        "callback_steps",
        "callback_on_step_end",
        "callback_on_step_end_tensor_inputs",
        "prompt_embeds",
        "negative_prompt_embeds",
    }
)

#: Shared request field -> the diffusers ``__call__`` argument it becomes.
SHARED_TO_CALL = {
    "prompt": "prompt",
    "negative_prompt": "negative_prompt",
    "height": "height",
    "width": "width",
    "num_frames": "num_frames",
    "num_inference_steps": "num_inference_steps",
    "guidance_scale": "guidance_scale",
}


#: Frame rate of a video pipeline whose ``__call__`` declares none (diffusers' export default).
DEFAULT_FPS = 16


class AdapterExtras(BaseModel):
    """Extras are the pipeline's own ``__call__`` keyword arguments, checked by name at load."""

    model_config = ConfigDict(extra="allow")


class DiffusersAdapterPipeline(StagedPipeline):
    """A diffusers ``DiffusionPipeline`` run as one step (see the module docstring)."""

    extras_model = AdapterExtras

    def __init__(self, pipe: Any, options: PipelineOptions, routing: dict[str, Any]) -> None:
        self.pipe = pipe
        self.options = options
        self.routing = routing
        self.parameters = inspect.signature(pipe.__call__).parameters
        self.is_video = "num_frames" in self.parameters

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> DiffusersAdapterPipeline:
        import diffusers
        import torch

        from omni_core.diffusion.attention_routing import route_attention
        from omni_core.diffusion.diffusers_compat import dtype_kwargs

        try:
            class_name = json.loads((path / "model_index.json").read_text())["_class_name"]
        except (OSError, json.JSONDecodeError, KeyError) as exc:
            raise ModelNotFoundError(f"{path}: not a diffusers checkpoint ({exc})") from None
        pipeline_cls = getattr(diffusers, class_name, None)
        if pipeline_cls is None or not issubclass(pipeline_cls, diffusers.DiffusionPipeline):
            raise ModelNotFoundError(
                f"{path}: diffusers {diffusers.__version__} has no pipeline class "
                f"{class_name!r} (custom pipelines and remote code are never loaded)"
            )
        pipe = pipeline_cls.from_pretrained(
            path, **dtype_kwargs(options.dtype), use_safetensors=True
        ).to(options.device)
        pipe.set_progress_bar_config(disable=True)
        routing: dict[str, Any] = {"routed": {}, "skipped": []}
        for name, component in pipe.components.items():
            if isinstance(component, torch.nn.Module):
                report = route_attention(component, options.attention)
                if report.total:
                    routing["routed"][name] = report.routed
                routing["skipped"].extend(f"{name}.{s}" for s in report.skipped)
        return cls(pipe, options, routing)

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        return check_request(type(self.pipe).__name__, self.parameters, request)

    def warmup_fields(self) -> dict[str, Any]:
        """One step of what this pipeline's ``__call__`` takes: two where the scheduler
        stretches its sigmas to a ``shift_terminal`` (one step divides by zero there), a grey
        image where it takes an image (and a white mask where it takes one)."""
        from PIL import Image

        fields: dict[str, Any] = {"prompt": "warm-up"}
        if "num_inference_steps" in self.parameters:
            scheduler = self.pipe.components.get("scheduler")
            config = scheduler.config if scheduler is not None else {}
            fields["num_inference_steps"] = 2 if config.get("shift_terminal") else 1
        if "image" in self.parameters:
            fields["images"] = [Image.new("RGB", (64, 64), (128, 128, 128))]
        if "mask_image" in self.parameters:
            fields["mask_image"] = Image.new("L", (64, 64), 255)
        return fields

    def output_fps(self, request: GenerationRequest) -> int | None:
        """A video pipeline's frame rate: the request's ``fps`` extra where ``__call__`` takes
        one, else the default ``__call__`` declares for ``fps``, else :data:`DEFAULT_FPS`."""
        if not self.is_video:
            return None
        parameter = self.parameters.get("fps")
        if parameter is None:
            return DEFAULT_FPS
        given = request.extras.get("fps")
        if given is not None:
            return int(given)
        default = parameter.default
        if isinstance(default, int | float) and not isinstance(default, bool) and default > 0:
            return int(default)
        return DEFAULT_FPS

    @classmethod
    def precheck(cls, path: Path, request: GenerationRequest) -> GenerationRequest:
        """The same checks from the pipeline class's ``__call__`` signature, without weights."""
        try:
            import diffusers

            name = json.loads((path / "model_index.json").read_text())["_class_name"]
            pipeline_cls = getattr(diffusers, name)
        except Exception:  # noqa: BLE001 - from_pretrained reports an unusable checkpoint
            return super().precheck(path, request)
        parameters = inspect.signature(pipeline_cls.__call__).parameters
        return check_request(name, parameters, request)

    def prepare(self, request: GenerationRequest) -> DenoiseState:
        request = self.validate(request)
        seed = request.seed if request.seed is not None else random.randrange(2**63)
        kwargs: dict[str, Any] = {}
        for field, argument in SHARED_TO_CALL.items():
            value = getattr(request, field)
            if value is not None and argument in self.parameters:
                kwargs[argument] = value
        if request.images:
            kwargs["image"] = request.images[0] if len(request.images) == 1 else request.images
        if request.num_outputs > 1:
            per = "num_videos_per_prompt" if self.is_video else "num_images_per_prompt"
            kwargs[per] = request.num_outputs
        kwargs.update(request.extras)
        return DenoiseState(request=request, num_steps=1, data={"kwargs": kwargs, "seed": seed})

    def step(self, states: list[DenoiseState]) -> None:
        """Run the whole diffusers pipeline for the (single) state: its one step."""
        import torch

        for state in states:
            kwargs = state.data["kwargs"]
            generator = torch.Generator("cpu").manual_seed(state.data["seed"])
            with torch.no_grad():
                output = self.pipe(
                    **kwargs,
                    generator=generator,
                    output_type="np" if self.is_video else "pil",
                    return_dict=False,
                )
            state.data["output"] = output[0]
            state.step_index += 1

    def decode(self, state: DenoiseState) -> GenerationResult:
        import numpy as np

        output = state.data["output"]
        info = {"seed": state.data["seed"], "attention": self.routing}
        if self.is_video:
            frames = np.asarray(output[0] if isinstance(output, list) else output)
            if frames.ndim == 5:
                frames = frames[0]
            video = (np.clip(frames, 0.0, 1.0) * 255).round().astype(np.uint8)
            return GenerationResult(video=video, fps=self.output_fps(state.request), info=info)
        images = list(output) if isinstance(output, list | tuple) else [output]
        return GenerationResult(images=images, info=info)


def check_request(
    name: str, parameters: Mapping[str, Any], request: GenerationRequest
) -> GenerationRequest:
    """Reject what the diffusers pipeline ``name`` (whose ``__call__`` takes ``parameters``)
    cannot do with ``request``, naming the field, before any compute."""
    for key in request.extras:
        if key in RESERVED:
            raise InvalidRequestError(f"extras.{key} is set by omni itself", param=key)
        if key not in parameters:
            known = sorted(set(parameters) - RESERVED - set(SHARED_TO_CALL) - {"self", "image"})
            raise InvalidRequestError(
                f"unknown extra {key!r} for {name}; it accepts: {', '.join(known) or 'none'}",
                param=key,
            )
    for field, argument in SHARED_TO_CALL.items():
        value = getattr(request, field)
        if value is not None and field != "prompt" and argument not in parameters:
            raise InvalidRequestError(f"{name} takes no {field}", param=field)
    if request.images and "image" not in parameters:
        raise InvalidRequestError(f"{name} takes no conditioning image", param="image")
    if request.num_outputs > 1:
        per = "num_videos_per_prompt" if "num_frames" in parameters else "num_images_per_prompt"
        if per not in parameters:
            raise InvalidRequestError(f"{name} makes one output per prompt", param="n")
    return request
