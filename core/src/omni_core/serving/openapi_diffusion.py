"""The published bodies of the diffusion endpoints, per served model: images, edits, videos and
image models' chat answers (:mod:`omni_core.serving.openapi_bodies` assembles them). Each is
found by asking the model (:mod:`omni_core.serving.probes`) under this server's limits: the
sizes, steps, frame counts, output counts, adapters and extras it takes. Long because the four
endpoints share one finder (:class:`DiffusionFields`) and differ in shape only: kept together,
what one model publishes on each reads side by side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from omni_core.serving import compat, probes
from omni_core.serving.openapi_fields import (
    IMAGE_DATA_URL,
    NOT_BLANK,
    field_schemas,
    ignored_fields,
    limits_note,
    model_branch,
)
from omni_core.serving.schemas import ImageEditBody

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.serving.models import ServedModel
    from omni_core.serving.state import ServerState


class DiffusionFields:
    """What one diffusion model takes on one endpoint: the reference body it accepts and the
    published schema of each shared field."""

    def __init__(self, state: ServerState, served: ServedModel, endpoint: str) -> None:
        self.state, self.served, self.endpoint = state, served, endpoint
        needs_image = endpoint == "images.edits" or (
            endpoint == "chat" and "i2i" in served.tasks and "t2i" not in served.tasks
        )
        self.probe = probes.Probe(state, served, images=1 if needs_image else 0)
        self.takes_images = needs_image or self._takes_image(endpoint)
        self.most_images = self._most_images() if needs_image else 0
        self.props: dict[str, dict[str, Any]] = {}
        self.required: list[str] = []
        self.base: dict[str, Any] | None = self._find()

    def _most_images(self) -> int:
        """How many input images the model takes at once (within --max-images)."""
        most = 1
        for count in range(2, self.state.config.max_images + 1):
            several = probes.Probe(self.state, self.served, images=count)
            if not several.fits({"images", "image"}, {"prompt": "probe"}):
                break
            most = count
        return most

    def _takes_image(self, endpoint: str) -> bool:
        if endpoint != "videos":
            return False
        with_image = probes.Probe(self.state, self.served, images=1)
        return with_image.fits({"images"}, {"prompt": "probe"})

    def _find(self) -> dict[str, Any] | None:
        """The reference body (the least a request needs) and every shared field's schema;
        None when the model takes no body of this endpoint at all."""
        config, probe = self.state.config, self.probe
        base: dict[str, Any] = {"prompt": "probe"}
        if self.endpoint == "images.edits":  # the route's default: the input image's size
            compat.default_size(probe.pipeline, base, {}, probe.images[0].size)
        steps = {"num_inference_steps"}
        if not probe.fits(steps, base):  # the model's default steps are over --max-steps
            most = min(1000, config.max_steps or 1000)
            taken = [
                n
                for n in range(1, most + 1)
                if probe.fits(steps, {**base, **{"num_inference_steps": n}})
            ]
            if not taken:
                return None
            base["num_inference_steps"] = taken[0]
            self.required.append("num_inference_steps")
        found = probes.sizes(probe, self._without_size(base), config.max_pixels)
        if not found:
            return None
        if not probe.fits(probes.SIZE_PARAMS, base):  # the default size is over a limit
            base.update(width=found[0][0], height=found[0][1])
            self.required.append("size")
        if self.endpoint == "videos":
            counts = probes.frames(probe, base, min(config.max_frames or 241, 1024))
            if not counts:
                return None
            if not probe.fits({"num_frames"}, base):
                base["num_frames"] = counts[0]
                self.required.append("num_frames")
            seconds = [
                s
                for s in probes.SECONDS
                if probe.ok({k: v for k, v in base.items() if k != "num_frames"}, seconds=float(s))
            ]
            self.props["num_frames"] = probes.contiguous(counts)
            if seconds:
                self.props["seconds"] = {
                    "type": "string",
                    "enum": seconds,
                    "description": "Clip length; num_frames = seconds x fps + 1.",
                }
        if not probe.ok(base):
            return None
        self.props["prompt"] = self._prompt(base)
        sized = [
            f"{w}x{h}"
            for w, h in found
            if probe.ok({**self._without_size(base), "width": w, "height": h})
        ]
        if "size" not in self.required:
            sized.append("auto")
        self.props["size"] = {
            "type": "string",
            "enum": sized,
            "description": "WIDTHxHEIGHT, one of the sizes this model takes under this server's "
            "limits"
            + (
                "; 'auto' or none: the input image's size, rounded to what the model takes"
                if self.endpoint == "images.edits"
                else "; 'auto' or none: the model's default"
            )
            + "."
            + limits_note(self.state),
        }
        self._numbers(base)
        return base

    @staticmethod
    def _without_size(base: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in base.items() if k not in ("width", "height")}

    def _prompt(self, base: dict[str, Any]) -> dict[str, Any]:
        longest = probes.bounds(
            lambda n: self.probe.ok({**base, "prompt": "a" * int(n)}),
            1,
            32_000,
            5,
            integer=True,
        )
        top = int(longest[1]) if longest else 32_000
        return {"type": "string", "minLength": 1, "maxLength": top, "pattern": NOT_BLANK}

    def _numbers(self, base: dict[str, Any]) -> None:
        config, probe = self.state.config, self.probe
        built = probe.build(base)
        steps_known = getattr(built, "num_inference_steps", None) or 1
        steps = probes.bounds(  # with --max-steps below the default, steps are required
            lambda v: probe.ok({**base, "num_inference_steps": int(v)}),
            1,
            min(1000, config.max_steps or 1000),
            steps_known,
            integer=True,
        )
        if steps:
            self.props["num_inference_steps"] = {
                "type": "integer",
                "minimum": int(steps[0]),
                "maximum": int(steps[1]),
            }
        guidance = probes.bounds(
            lambda v: probe.ok({**base, "guidance_scale": v}), 0.0, 100.0, 1.0, integer=False
        )
        if guidance:
            self.props["guidance_scale"] = {
                "type": "number",
                "minimum": guidance[0],
                "maximum": guidance[1],
            }
        if probe.ok({**base, "seed": 0}) and probe.ok({**base, "seed": 2**63 - 1}):
            self.props["seed"] = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
        if probe.ok({**base, "negative_prompt": "probe"}):
            self.props["negative_prompt"] = {"type": "string", "maxLength": 32_000}
        if self.endpoint in ("images.generations", "images.edits", "chat"):
            outputs = probes.bounds(
                lambda v: probe.ok({**base, "num_outputs": int(v)}),
                1,
                min(10, config.max_outputs or 10),
                1,
                integer=True,
            )
            most = int(outputs[1]) if outputs else 1
            self.props["n"] = {"type": "integer", "minimum": 1, "maximum": most}
        adapters = probe.pipeline.adapters
        if adapters is not None:
            names = [
                a["name"]
                for a in adapters.describe().get("adapters", [])
                if probe.ok({**base, "lora": [{"name": a["name"]}]})
            ]
            if names:
                self.props["lora"] = {
                    "type": "array",
                    "maxItems": len(names),
                    "uniqueItems": True,
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string", "enum": names},
                            "scale": {"type": "number", "minimum": -10, "maximum": 10},
                        },
                        "required": ["name"],
                        "additionalProperties": False,
                    },
                }

    def corners(self) -> list[dict[str, Any]]:
        """The reference body with every numeric shared field at its low and at its high end
        (an extra aliasing one must agree with it at both)."""
        assert self.base is not None
        low, high = dict(self.base), dict(self.base)
        for name, target in (("num_inference_steps", None), ("guidance_scale", None)):
            prop = self.props.get(name)
            if prop:
                low[target or name], high[target or name] = prop["minimum"], prop["maximum"]
        return [low, high]

    def extras(self) -> dict[str, dict[str, Any]]:
        assert self.base is not None
        return probes.extras(self.probe, self.base, self.corners())


def image_branch(
    state: ServerState, served: ServedModel, endpoint: str, one: bool, *, multipart: bool
) -> dict[str, Any] | None:
    """A model's body for ``/v1/images/generations`` (JSON) or ``/v1/images/edits`` (form)."""
    found = DiffusionFields(state, served, endpoint)
    if found.base is None:
        return None
    fields = field_schemas(ImageEditBody)
    props = {
        **{k: v for k, v in found.props.items()},
        "response_format": fields["response_format"],
        "output_format": {"type": "string", "enum": ["png", "jpeg", "jpg", "webp"]},
        **found.extras(),
        **ignored_fields(endpoint, found.probe.pipeline),
    }
    required = ["prompt", *found.required]
    if multipart:
        props = form_properties(props)
        props["image"] = {
            "type": "string",
            "format": "binary",
            "description": f"The image to edit (PNG, JPEG or WebP, up to "
            f"{state.config.max_upload_mb:g} MB; up to {found.most_images} of them as repeated "
            "'image' or 'image[]' parts, or 'url' fields). Without a size the output takes the "
            f"first image's size, rounded to what the model takes: it must fit "
            f"{state.config.max_pixels or 'any'} pixels (--max-pixels).",
        }
        required.append("image")
    return model_branch(served.id, props, required, one)


def form_properties(props: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Properties as a multipart form carries them: scalars only (text parts)."""
    return {
        name: prop
        for name, prop in props.items()
        if prop.get("type") not in ("object", "array") and "anyOf" not in prop
    }


def video_branch(
    state: ServerState, served: ServedModel, one: bool, *, multipart: bool
) -> dict[str, Any] | None:
    """A model's body for ``/v1/videos`` (and ``/v1/videos/sync``): JSON or form."""
    found = DiffusionFields(state, served, "videos")
    if found.base is None:
        return None
    props = {
        **found.props,
        **found.extras(),
        **ignored_fields("videos", found.probe.pipeline),
    }
    if multipart:
        props = form_properties(props)
    if found.takes_images:
        if multipart:
            props["input_reference"] = {
                "type": "string",
                "format": "binary",
                "description": "The first frame (PNG, JPEG or WebP).",
            }
        else:
            url = {"type": "string", "format": IMAGE_DATA_URL}
            props["input_reference"] = {
                "description": "The first frame: an image data URL, or {'image_url': URL}.",
                "oneOf": [
                    url,
                    {
                        "type": "object",
                        "properties": {"image_url": url},
                        "required": ["image_url"],
                        "additionalProperties": False,
                    },
                ],
            }
    branch = model_branch(served.id, props, ["prompt", *found.required], one)
    if "num_frames" in found.required and "seconds" in props:
        branch["required"].remove("num_frames")
        branch["oneOf"] = [
            {"required": ["num_frames"], "not": {"required": ["seconds"]}},
            {"required": ["seconds"], "not": {"required": ["num_frames"]}},
        ]
    elif "seconds" in props:
        branch["not"] = {"required": ["num_frames", "seconds"]}
    return branch


# -- chat: image models' answers ----------------------------------------------------------------


def _message(roles: list[str], content: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"role": {"type": "string", "enum": roles}, "content": content},
        "required": ["role", "content"],
        "additionalProperties": False,
    }


def chat_image_branch(state: ServerState, served: ServedModel, one: bool) -> dict[str, Any] | None:
    """An image model's body for ``/v1/chat/completions``: the prompt is the text of the user
    messages, their ``image_url`` parts the input images (data URLs)."""
    found = DiffusionFields(state, served, "chat")
    if found.base is None:
        return None
    text = {"type": "string", "maxLength": 32_000}
    spoken = {"type": "string", "maxLength": 32_000, "pattern": NOT_BLANK}
    text_part = {
        "type": "object",
        "properties": {"type": {"const": "text"}, "text": spoken},
        "required": ["type", "text"],
        "additionalProperties": False,
    }
    image_part = {
        "type": "object",
        "properties": {
            "type": {"const": "image_url"},
            "image_url": {
                "type": "object",
                "properties": {"url": {"type": "string", "format": IMAGE_DATA_URL}},
                "required": ["url"],
                "additionalProperties": False,
            },
        },
        "required": ["type", "image_url"],
        "additionalProperties": False,
    }
    if found.probe.images:  # an editing model: the user message carries the images
        user = _message(
            ["user"],
            {
                "type": "array",
                "items": {"oneOf": [text_part, image_part]},
                "allOf": [{"contains": text_part}, {"contains": image_part}],
                "minItems": 2,
                "maxItems": found.most_images + 1,
                "description": f"The prompt's text parts and up to {found.most_images} "
                "images to edit (one text part and the images, or fewer images).",
            },
        )
        messages = {
            "type": "array",
            "minItems": 1,
            "maxItems": 1,
            "items": user,
            "description": "One user message: a text part, then the images to edit.",
        }
    else:
        messages = {
            "type": "array",
            "minItems": 1,
            "maxItems": 64,
            "items": {
                "oneOf": [
                    _message(["user"], spoken),
                    _message(["system", "developer"], text),
                ]
            },
            "contains": _message(["user"], spoken),
            "description": "The user messages' text is the prompt; system and developer "
            "messages are accepted and ignored (X-Omni-Ignored-Fields), as vLLM-Omni drops them.",
        }
    props: dict[str, dict[str, Any]] = {
        "messages": messages,
        "stream": {"type": "boolean"},
        "stream_options": {
            "type": "object",
            "properties": {"include_usage": {"type": "boolean"}},
            "additionalProperties": False,
        },
        "modalities": {"type": "array", "items": {"const": "image"}, "minItems": 1, "maxItems": 1},
        **{k: v for k, v in found.props.items() if k not in ("prompt", "n")},
        **found.extras(),
        **ignored_fields("chat", found.probe.pipeline),
    }
    branch = model_branch(served.id, props, ["messages", *found.required], one)
    most_outputs = int(found.props["n"].get("maximum", 1))
    branch["properties"]["n"] = {"type": "integer", "minimum": 1, "maximum": most_outputs}
    branch["properties"]["num_outputs_per_prompt"] = {
        "type": "integer",
        "minimum": 1,
        "maximum": most_outputs,
        "description": "vLLM-Omni: images per choice; n x num_outputs_per_prompt images in all.",
    }
    branch["anyOf"] = [  # n x num_outputs_per_prompt within the server's --max-outputs
        {
            "properties": {
                "n": {"const": k} if k > 1 else {"enum": [1]},
                "num_outputs_per_prompt": {"maximum": most_outputs // k},
            },
            **({"required": ["n"]} if k > 1 else {}),
        }
        for k in range(1, most_outputs + 1)
    ]
    return branch
