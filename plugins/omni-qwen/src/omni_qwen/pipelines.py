"""Qwen-Image, Qwen-Image-Edit and Qwen-Image-Edit-2509 on omni's staged runtime.

diffusers' ``QwenImagePipeline``, ``QwenImageEditPipeline`` and ``QwenImageEditPlusPipeline`` are
the references: the models, VAE, scheduler, tokenizer and processor are theirs (and
transformers'), loaded from the same checkpoint folder; this module is the orchestration around
them, rewritten for the staged protocol so that requests of one size share each transformer
forward and classifier-free guidance runs the conditional and unconditional branches as one
batch. The maths is the reference's, operation for operation, so the same seed gives the same
pixels:

* the prompt goes through Qwen2.5-VL inside Qwen-Image's chat template; the system prefix
  (34 tokens for text-to-image, 64 for edits) is dropped from the last hidden state;
* noise is drawn as ``[n, 1, C, H/8, W/8]`` from ``torch.Generator("cpu").manual_seed(seed)``
  and packed into 2x2 patches; the sigmas are ``linspace(1, 1/steps)`` shifted with the
  resolution-dependent ``mu`` by the checkpoint's FlowMatchEulerDiscreteScheduler;
* true CFG: ``neg + s * (cond - neg)`` rescaled to the conditional prediction's norm;
* edits append the VAE latents of the input image(s) to the image sequence and describe them to
  the text encoder (Edit-2509: "Picture i:" for each image, at 384x384 area).

Prompt embeddings and input-image latents are kept in small LRU caches, so repeating a prompt
(or editing the same image again) skips the encoder; the hit rate is in ``result.timings``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from pydantic import ValidationError

from omni_core.errors import ConfigError, InvalidRequestError, ModelNotFoundError
from omni_core.pipelines.base import (
    DenoiseState,
    GenerationRequest,
    GenerationResult,
    PipelineOptions,
    StagedPipeline,
)
from omni_qwen.extras import QwenImageExtras

T2I_TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, "
    "quantity, text, spatial relationships of the objects and background:<|im_end|>\n"
    "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
)
_EDIT_SYSTEM = (
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, "
    "texture, objects, background), then explain how the user's text instruction should alter "
    "or modify the image. Generate a new image that meets the user's requirements while "
    "maintaining consistency with the original input where appropriate.<|im_end|>\n"
    "<|im_start|>user\n"
)
_ASSISTANT = "<|im_end|>\n<|im_start|>assistant\n"
EDIT_TEMPLATE = _EDIT_SYSTEM + "<|vision_start|><|image_pad|><|vision_end|>{}" + _ASSISTANT
EDIT_PLUS_TEMPLATE = _EDIT_SYSTEM + "{}" + _ASSISTANT
_PICTURE = "Picture {}: <|vision_start|><|image_pad|><|vision_end|>"

#: Output area edits default to (and Edit-2509's VAE input area); Edit-2509's text-encoder area.
_EDIT_AREA = 1024 * 1024
_CONDITION_AREA = 384 * 384
_TOKENIZER_MAX_LENGTH = 1024
_DEFAULT_STEPS = 50
_DEFAULT_CFG = 4.0


# -- checkpoint layout (read without weights, so precheck is cheap) ----------------------------


@dataclass(frozen=True)
class QwenLayout:
    """What the configs of a Qwen-Image checkpoint say, enough to validate a request."""

    path: Path
    class_name: str
    vae_scale_factor: int
    latent_channels: int
    #: 2 when the scheduler stretches sigmas to a terminal value (one step divides by zero).
    min_steps: int = 1
    guidance_embeds: bool = False

    @property
    def multiple(self) -> int:
        """Pixel sizes must be multiples of this: the VAE factor times the 2x2 patch."""
        return self.vae_scale_factor * 2

    @classmethod
    def read(cls, path: Path) -> QwenLayout:
        try:
            index = json.loads((path / "model_index.json").read_text())
            vae = json.loads((path / "vae" / "config.json").read_text())
            transformer = json.loads((path / "transformer" / "config.json").read_text())
            scheduler = json.loads((path / "scheduler" / "scheduler_config.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelNotFoundError(f"{path}: not a Qwen-Image checkpoint ({exc})") from exc
        return cls(
            path=path,
            class_name=str(index.get("_class_name", "")),
            vae_scale_factor=2 ** len(vae.get("temperal_downsample", [False, True, True])),
            latent_channels=int(transformer.get("in_channels", 64)) // 4,
            min_steps=2 if scheduler.get("shift_terminal") else 1,
            guidance_embeds=bool(transformer.get("guidance_embeds", False)),
        )


def _calculate_dimensions(area: int, ratio: float) -> tuple[int, int]:
    """(width, height) of ``area`` pixels at ``ratio``, rounded to multiples of 32 (Qwen's rule)."""
    width = math.sqrt(area * ratio)
    height = width / ratio
    return round(width / 32) * 32, round(height / 32) * 32


def _load_image(value: Any, index: int) -> Any:
    """A PIL RGB image from a PIL image, bytes or a file path; InvalidRequestError otherwise."""
    from PIL import Image, UnidentifiedImageError

    param = f"images[{index}]" if index else "images"
    try:
        if isinstance(value, Image.Image):
            image = value
        elif isinstance(value, bytes | bytearray):
            image = Image.open(io.BytesIO(value))
        elif isinstance(value, str | Path):
            image = Image.open(Path(value))
        else:
            raise InvalidRequestError(
                f"images[{index}]: expected an image (PIL, bytes or a path), got "
                f"{type(value).__name__}",
                param=param,
            )
        image.load()
        if image.width < 1 or image.height < 1:
            raise InvalidRequestError(f"images[{index}] is empty", param=param)
        return image.convert("RGB")
    except InvalidRequestError:
        raise
    except (
        UnidentifiedImageError,
        OSError,
        ValueError,
        SyntaxError,  # PIL's "broken PNG file"
        EOFError,
        Image.DecompressionBombError,
    ) as exc:
        raise InvalidRequestError(
            f"images[{index}] could not be read as an image: {exc}", param=param
        ) from None


# -- caches -------------------------------------------------------------------------------------


class LRUCache:
    """A small thread-safe LRU map that counts its hits (for the timings)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, int(capacity))
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Any:
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: Hashable, value: Any) -> None:
        if self.capacity == 0:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


def _image_digest(image: Any) -> str:
    digest = hashlib.blake2b(image.tobytes(), digest_size=16)
    digest.update(f"{image.mode}{image.size}".encode())
    return digest.hexdigest()


#: One input image of an edit: (image for the VAE, image for the text encoder, VAE size (w, h)).
Condition = tuple[Any, Any, tuple[int, int]]


# -- the state of one request --------------------------------------------------------------------


@dataclass
class QwenState(DenoiseState):
    """One request in flight: ``rows`` images (num_outputs) denoised together."""

    rows: int = 1
    height: int = 0
    width: int = 0
    cfg: bool = False
    latents: torch.Tensor | None = None  # [rows, seq, C*4], model dtype
    image_latents: torch.Tensor | None = None  # [rows, seq_img, C*4] (edits)
    prompt_embeds: torch.Tensor | None = None  # [1, L, D]
    negative_embeds: torch.Tensor | None = None  # [1, L', D]
    timesteps: torch.Tensor | None = None  # [steps] float32, device
    dts: torch.Tensor | None = None  # [steps] float32: sigma[i+1] - sigma[i]
    scale: torch.Tensor | None = None  # [rows, 1, 1] float32
    img_shapes: tuple[tuple[int, int, int], ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


# -- the pipelines ------------------------------------------------------------------------------


class QwenImagePipeline(StagedPipeline):
    """Qwen-Image text-to-image (diffusers' ``QwenImagePipeline``)."""

    extras_model = QwenImageExtras
    #: How many input images a request takes: (min, max).
    image_range: ClassVar[tuple[int, int]] = (0, 0)
    template: ClassVar[str] = T2I_TEMPLATE
    drop_tokens: ClassVar[int] = 34
    family: ClassVar[str] = "qwen-image"

    def __init__(self, layout: QwenLayout, components: dict[str, Any], options: PipelineOptions):
        from diffusers.image_processor import VaeImageProcessor

        self.layout = layout
        self.options = options
        self.device = options.device
        self.dtype = options.dtype
        self.transformer = components["transformer"]
        self.vae = components["vae"]
        self.text_encoder = components["text_encoder"]
        self.tokenizer = components["tokenizer"]
        self.processor = components.get("processor")
        self.scheduler = components["scheduler"]
        self.image_processor = VaeImageProcessor(vae_scale_factor=layout.vae_scale_factor * 2)
        self.routing = _route(self.transformer, options)
        #: Set by from_pretrained: what omni_core.acceleration applied (None: nothing).
        self.accel: Any = None
        vae_cfg = self.vae.config
        self._latents_mean = torch.tensor(vae_cfg.latents_mean).view(1, vae_cfg.z_dim, 1, 1, 1)
        self._latents_std = torch.tensor(vae_cfg.latents_std).view(1, vae_cfg.z_dim, 1, 1, 1)
        size = int(options.extra.get("prompt_cache_size", 64))
        self.prompt_cache = LRUCache(size)
        self.image_cache = LRUCache(int(options.extra.get("image_cache_size", 16)))
        self._model_key = str(layout.path)

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> QwenImagePipeline:
        from diffusers import (
            AutoencoderKLQwenImage,
            FlowMatchEulerDiscreteScheduler,
            QwenImageTransformer2DModel,
        )
        from transformers import Qwen2_5_VLForConditionalGeneration, Qwen2Tokenizer

        layout = QwenLayout.read(path)
        if layout.guidance_embeds:
            raise ConfigError(
                f"{path}: guidance-distilled Qwen-Image transformers are not supported"
            )
        device, dtype = options.device, options.dtype
        # The text encoder may live elsewhere (e.g. "cpu") to leave the GPU to the denoiser.
        encoder_device = options.extra.get("text_encoder_device") or device
        scheduler_cfg = json.loads((path / "scheduler" / "scheduler_config.json").read_text())
        if scheduler_cfg.get("_class_name") != "FlowMatchEulerDiscreteScheduler" or (
            scheduler_cfg.get("stochastic_sampling")
        ):
            raise ConfigError(
                f"{path}: Qwen-Image pipelines need a deterministic "
                f"FlowMatchEulerDiscreteScheduler, found {scheduler_cfg.get('_class_name')!r}"
            )
        components: dict[str, Any] = {
            "transformer": QwenImageTransformer2DModel.from_pretrained(
                path / "transformer", torch_dtype=dtype, use_safetensors=True
            )
            .to(device)
            .eval(),
            "vae": AutoencoderKLQwenImage.from_pretrained(
                path / "vae", torch_dtype=dtype, use_safetensors=True
            )
            .to(device)
            .eval(),
            "text_encoder": Qwen2_5_VLForConditionalGeneration.from_pretrained(
                path / "text_encoder", dtype=dtype, use_safetensors=True
            )
            .to(encoder_device)
            .eval(),
            "tokenizer": Qwen2Tokenizer.from_pretrained(path / "tokenizer"),
            "scheduler": FlowMatchEulerDiscreteScheduler.from_pretrained(path / "scheduler"),
        }
        if cls.image_range[1]:
            from omni_qwen.compat import load_vl_processor

            components["processor"] = load_vl_processor(path / "processor")
        from omni_core.acceleration import apply_acceleration

        # Quantization, regional compile and the step cache, as configured (order fixed there).
        accel = apply_acceleration(
            {"transformer": components["transformer"]}, options, pipeline_cls=cls
        )
        pipeline = cls(layout, components, options)
        pipeline.accel = accel
        return pipeline

    # -- validation (before any compute) ---------------------------------------------------

    @classmethod
    def precheck(cls, path: Path, request: GenerationRequest) -> GenerationRequest:
        return cls._check(QwenLayout.read(path), request)

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        return self._check(self.layout, request)

    @classmethod
    def _check(cls, layout: QwenLayout, request: GenerationRequest) -> GenerationRequest:
        try:
            extras = QwenImageExtras.model_validate(request.extras)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "extras"
            raise InvalidRequestError(f"extras.{where}: {first['msg']}", param=where) from None
        if request.num_frames not in (None, 1):
            raise InvalidRequestError(
                f"{cls.family} makes images; num_frames must be 1, not {request.num_frames}",
                param="num_frames",
            )
        low, high = cls.image_range
        count = len(request.images)
        if high == 0 and count:
            raise InvalidRequestError(
                f"{cls.family} is text-to-image and takes no input image (got {count}); use a "
                "Qwen-Image-Edit model to edit images",
                param="images",
            )
        if count < low:
            raise InvalidRequestError(
                f"{cls.family} edits an image: give one with images=[...] (CLI: --image PATH)",
                param="images",
            )
        if count > high:
            raise InvalidRequestError(
                f"{cls.family} takes at most {high} input image{'s' if high > 1 else ''}, "
                f"got {count}",
                param="images",
            )
        images = [_load_image(image, i) for i, image in enumerate(request.images)]
        height, width = request.height, request.width
        if images:
            reference = images[-1] if cls.image_range[1] > 1 else images[0]
            calc_w, calc_h = _calculate_dimensions(_EDIT_AREA, reference.width / reference.height)
            width = width or calc_w // layout.multiple * layout.multiple
            height = height or calc_h // layout.multiple * layout.multiple
        else:
            default = 128 * layout.vae_scale_factor
            height, width = height or default, width or default
        for name, value in (("height", height), ("width", width)):
            if value % layout.multiple or value < layout.multiple:
                low_size = max(layout.multiple, value // layout.multiple * layout.multiple)
                raise InvalidRequestError(
                    f"{name}={value}: this model makes sizes in multiples of {layout.multiple} "
                    f"pixels (VAE x{layout.vae_scale_factor} times the 2x2 patch), e.g. "
                    f"{low_size} or {low_size + layout.multiple}; native sizes include "
                    "1328x1328, 1664x928, 928x1664, 1472x1140, 1140x1472, 1584x1056, 1056x1584",
                    param="size",
                )
        steps = request.num_inference_steps or _DEFAULT_STEPS
        if steps < layout.min_steps:
            raise InvalidRequestError(
                f"num_inference_steps={steps}: this checkpoint's scheduler (shift_terminal) needs "
                f"at least {layout.min_steps} steps",
                param="num_inference_steps",
            )
        scale = request.guidance_scale
        if extras.true_cfg_scale is not None:
            if scale is not None and scale != extras.true_cfg_scale:
                raise InvalidRequestError(
                    f"guidance_scale={scale} and true_cfg_scale={extras.true_cfg_scale} disagree; "
                    "they are the same setting for Qwen-Image, give one",
                    param="guidance_scale",
                )
            scale = extras.true_cfg_scale
        return request.model_copy(
            update={
                "images": images,
                "height": height,
                "width": width,
                "num_frames": None,
                "guidance_scale": _DEFAULT_CFG if scale is None else scale,
                "num_inference_steps": steps,
                "extras": {**extras.model_dump(), "true_cfg_scale": None},
            }
        )

    # -- stages ----------------------------------------------------------------------------

    @torch.no_grad()
    def prepare(self, request: GenerationRequest) -> QwenState:
        if request.height is None or request.width is None or request.num_inference_steps is None:
            request = self.validate(request)
        assert request.height and request.width and request.num_inference_steps
        extras = QwenImageExtras.model_validate(request.extras)
        rows = request.num_outputs
        height, width, steps = request.height, request.width, request.num_inference_steps
        scale = float(request.guidance_scale if request.guidance_scale is not None else 4.0)
        cfg = scale > 1 and request.negative_prompt is not None
        seed = request.seed if request.seed is not None else random.randrange(2**63)
        generator = torch.Generator("cpu").manual_seed(seed)
        state = QwenState(request=request, num_steps=steps, rows=rows, height=height, width=width)
        state.cfg = cfg

        hits0 = self.prompt_cache.hits
        t0 = time.perf_counter()
        conditions = self._conditions(request.images)
        state.prompt_embeds = self._encode(request.prompt, conditions, extras)
        if cfg:
            state.negative_embeds = self._encode(request.negative_prompt or "", conditions, extras)
        state.timings["encode_prompt_s"] = time.perf_counter() - t0
        lookups = 2 if cfg else 1
        state.timings["prompt_cache_hits"] = float(self.prompt_cache.hits - hits0)
        state.timings["prompt_cache_lookups"] = float(lookups)
        state.timings["prompt_cache_hit_rate"] = self.prompt_cache.hit_rate

        vsf = self.layout.vae_scale_factor
        channels = self.layout.latent_channels
        t1 = time.perf_counter()
        image_latents = [self._image_latents(image, size) for image, _, size in conditions]
        if image_latents:
            state.image_latents = torch.cat(
                [torch.cat([lat] * rows, dim=0) for lat in image_latents], dim=1
            )
            state.timings["encode_image_s"] = time.perf_counter() - t1

        from diffusers.utils.torch_utils import randn_tensor

        lat_h, lat_w = 2 * (height // (vsf * 2)), 2 * (width // (vsf * 2))
        noise = randn_tensor(
            (rows, 1, channels, lat_h, lat_w),
            generator=generator,
            device=self.device,
            dtype=self.dtype,
        )
        state.latents = _pack(noise)
        state.img_shapes = (
            (1, height // vsf // 2, width // vsf // 2),
            *((1, h // vsf // 2, w // vsf // 2) for _, _, (w, h) in conditions),
        )

        timesteps, sigmas = self._schedule(steps, state.latents.shape[1])
        state.timesteps = timesteps.to(self.device)
        sigmas = sigmas.to(self.device)
        state.dts = sigmas[1:] - sigmas[:-1]
        state.scale = torch.full((rows, 1, 1), scale, dtype=torch.float32, device=self.device)
        state.info = {"seed": seed, "cfg": cfg, "guidance_scale": scale}
        return state

    def batch_key(self, state: DenoiseState) -> Hashable:
        assert isinstance(state, QwenState)
        return (state.img_shapes, state.cfg)

    @torch.no_grad()
    def step(self, states: list[DenoiseState]) -> None:
        group: list[QwenState] = states  # type: ignore[assignment]
        first = group[0]
        dtype = first.latents.dtype  # type: ignore[union-attr]
        latents = _cat([s.latents for s in group])
        seq = latents.shape[1]
        model_in = latents
        if first.image_latents is not None:
            model_in = torch.cat([latents, _cat([s.image_latents for s in group])], dim=1)
        t = _cat([s.timesteps[s.step_index].expand(s.rows) for s in group])  # type: ignore[index]
        timestep = t.to(dtype) / 1000
        embeds = [s.prompt_embeds.expand(s.rows, -1, -1) for s in group]  # type: ignore[union-attr]
        branches = [embeds]
        if first.cfg:
            negatives = [s.negative_embeds.expand(s.rows, -1, -1) for s in group]  # type: ignore[union-attr]
            if self._batch_cfg(embeds + negatives):
                branches = [embeds + negatives]
                model_in = torch.cat([model_in, model_in], dim=0)
                timestep = torch.cat([timestep, timestep], dim=0)
            else:
                branches.append(negatives)
        names = _branch_names(len(branches)) if first.cfg else [None]
        outputs = []
        for branch, name in zip(branches, names, strict=True):
            encoder_states, mask = _pad(branch)
            with self._cache_context(group, name):
                outputs.append(
                    self.transformer(
                        hidden_states=model_in,
                        timestep=timestep,
                        guidance=None,
                        encoder_hidden_states=encoder_states,
                        encoder_hidden_states_mask=mask,
                        img_shapes=[list(first.img_shapes)] * model_in.shape[0],
                        return_dict=False,
                    )[0][:, :seq]
                )
        out = _cat(outputs)
        if first.cfg:
            cond, neg = out.chunk(2, dim=0)
            scale = _cat([s.scale for s in group])
            combined = neg + (scale * (cond - neg).float()).to(dtype)
            cond_norm = torch.norm(cond, dim=-1, keepdim=True)
            comb_norm = torch.norm(combined, dim=-1, keepdim=True)
            out = combined * (cond_norm / comb_norm)
        dt = _cat([s.dts[s.step_index].expand(s.rows) for s in group]).view(-1, 1, 1)  # type: ignore[index]
        updated = _euler(latents, out, dt)
        offset = 0
        for s in group:
            s.latents = updated[offset : offset + s.rows]
            offset += s.rows
            s.step_index += 1

    @torch.no_grad()
    def decode(self, state: DenoiseState) -> GenerationResult:
        assert isinstance(state, QwenState) and state.latents is not None
        vsf = self.layout.vae_scale_factor
        lat_h = 2 * (state.height // (vsf * 2))
        lat_w = 2 * (state.width // (vsf * 2))
        latents = _unpack(state.latents, lat_h, lat_w).to(self.vae.dtype)
        mean = self._latents_mean.to(latents.device, latents.dtype)
        std_inv = 1.0 / self._latents_std.to(latents.device, latents.dtype)
        latents = latents / std_inv + mean
        pixels = self.vae.decode(latents, return_dict=False)[0][:, :, 0]
        images = self.image_processor.postprocess(pixels, output_type="pil")
        if self.accel is not None and self.accel.caches:
            state.info["step_cache"] = self.accel.finish_request(state.request.request_id)
        info = {
            **state.info,
            "pipeline": self.spec.name if self.spec else self.family,
            "height": state.height,
            "width": state.width,
            "attention": self.routing,
        }
        return GenerationResult(images=list(images), timings=dict(state.timings), info=info)

    # -- helpers ---------------------------------------------------------------------------

    def _cache_context(self, group: list[QwenState], branch: str | None) -> Any:
        """The step cache's context for one forward (a no-op without a cache)."""
        if self.accel is None or not self.accel.caches:
            return contextlib.nullcontext()
        from omni_core.acceleration import cache_key

        return self.accel.cache_context(
            "transformer", cache_key((s.request.request_id for s in group), branch)
        )

    def _batch_cfg(self, embeds: list[torch.Tensor]) -> bool:
        """Whether CFG's two branches share one forward.

        ``options.extra["cfg_batch"]``: ``"auto"`` (default: share when no prompt needs padding,
        so attention keeps its unmasked kernels; otherwise two forwards, as diffusers runs
        them), ``"always"`` (pad the shorter prompts and pass a mask; the default under
        CFG-parallel, which splits a forward's rows over two ranks) or ``"never"``.
        """
        # Under CFG-parallel each rank runs one half of a batched forward's rows: batch them.
        default = "always" if self.options.parallel.cfg_parallel_size > 1 else "auto"
        mode = self.options.extra.get("cfg_batch", default)
        if mode not in ("auto", "always", "never"):
            raise ConfigError(f"cfg_batch: expected auto, always or never, not {mode!r}")
        if mode == "auto":
            return len({e.shape[1] for e in embeds}) == 1
        return mode == "always"

    def _conditions(self, images: list[Any]) -> list[Condition]:
        """(original, text-encoder image, VAE size (w, h)) per input image; none for t2i."""
        return []

    def _prompt_text(self, prompt: str, count: int) -> str:
        return self.template.format(prompt)

    def _encode(
        self, prompt: str, conditions: list[Condition], extras: QwenImageExtras
    ) -> torch.Tensor:
        """Prompt embeddings ``[1, L, D]`` (system prefix dropped), through the LRU cache."""
        key = (
            self._model_key,
            self.family,
            prompt,
            tuple(_image_digest(view) for _, view, _ in conditions),
            extras.max_sequence_length if not conditions else None,
            str(self.dtype),
            str(self.device),
        )
        cached = self.prompt_cache.get(key)
        if cached is not None:
            return cached
        text = self._prompt_text(prompt, len(conditions))
        device = next(self.text_encoder.parameters()).device
        if conditions:
            views = [view for _, view, _ in conditions]
            inputs = self.processor(
                text=[text],
                images=views if len(views) > 1 or self.image_range[1] > 1 else views[0],
                padding=True,
                return_tensors="pt",
            ).to(device)
            outputs = self.text_encoder(
                input_ids=inputs["input_ids"],
                attention_mask=inputs["attention_mask"],
                pixel_values=inputs.get("pixel_values"),
                image_grid_thw=inputs.get("image_grid_thw"),
                output_hidden_states=True,
            )
        else:
            inputs = self.tokenizer(
                [text],
                max_length=_TOKENIZER_MAX_LENGTH + self.drop_tokens,
                padding=True,
                truncation=True,
                return_tensors="pt",
            ).to(device)
            outputs = self.text_encoder(
                input_ids=inputs.input_ids,
                attention_mask=inputs.attention_mask,
                output_hidden_states=True,
            )
        hidden = outputs.hidden_states[-1]
        kept = hidden[inputs["attention_mask"].bool()][self.drop_tokens :]
        if not conditions:
            kept = kept[: extras.max_sequence_length]
        embeds = kept.unsqueeze(0).to(device=self.device, dtype=self.text_encoder.dtype)
        self.prompt_cache.put(key, embeds)
        return embeds

    def _image_latents(self, image: Any, size: tuple[int, int]) -> torch.Tensor:
        """Normalised, packed VAE latents ``[1, seq, C*4]`` of one input image (cached)."""
        width, height = size
        key = (self._model_key, _image_digest(image), size, str(self.dtype), str(self.device))
        cached = self.image_cache.get(key)
        if cached is not None:
            return cached
        pixels = self._vae_pixels(image, height, width).unsqueeze(2)
        pixels = pixels.to(device=self.device, dtype=self.dtype)
        latents = self.vae.encode(pixels).latent_dist.mode()
        mean = self._latents_mean.to(latents.device, latents.dtype)
        std = self._latents_std.to(latents.device, latents.dtype)
        latents = (latents - mean) / std
        packed = _pack(latents)
        self.image_cache.put(key, packed)
        return packed

    def _vae_pixels(self, image: Any, height: int, width: int) -> torch.Tensor:
        return self.image_processor.preprocess(image, height, width)

    def _schedule(self, steps: int, image_seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(timesteps, sigmas incl. the final 0) from the checkpoint's scheduler, shifted by mu."""
        import numpy as np

        config = self.scheduler.config
        base_len = config.get("base_image_seq_len", 256)
        max_len = config.get("max_image_seq_len", 4096)
        base_shift = config.get("base_shift", 0.5)
        max_shift = config.get("max_shift", 1.15)
        slope = (max_shift - base_shift) / (max_len - base_len)
        mu = image_seq_len * slope + (base_shift - slope * base_len)
        scheduler = type(self.scheduler).from_config(config)
        scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), device="cpu", mu=mu)
        return scheduler.timesteps.to(torch.float32), scheduler.sigmas.to(torch.float32)


class QwenImageEditPipeline(QwenImagePipeline):
    """Qwen-Image-Edit: one input image and an instruction (diffusers' QwenImageEditPipeline)."""

    image_range = (1, 1)
    template = EDIT_TEMPLATE
    drop_tokens = 64
    family = "qwen-image-edit"

    def _conditions(self, images: list[Any]) -> list[Condition]:
        (image,) = images
        width, height = _calculate_dimensions(_EDIT_AREA, image.width / image.height)
        resized = self.image_processor.resize(image, height, width)
        return [(resized, resized, (width, height))]


class QwenImageEditPlusPipeline(QwenImagePipeline):
    """Qwen-Image-Edit-2509: one to three input images (diffusers' QwenImageEditPlusPipeline)."""

    image_range = (1, 3)
    template = EDIT_PLUS_TEMPLATE
    drop_tokens = 64
    family = "qwen-image-edit-plus"

    def _conditions(self, images: list[Any]) -> list[Condition]:
        result = []
        for image in images:
            ratio = image.width / image.height
            cond_w, cond_h = _calculate_dimensions(_CONDITION_AREA, ratio)
            vae_size = _calculate_dimensions(_EDIT_AREA, ratio)
            result.append((image, self.image_processor.resize(image, cond_h, cond_w), vae_size))
        return result

    def _prompt_text(self, prompt: str, count: int) -> str:
        pictures = "".join(_PICTURE.format(i + 1) for i in range(count))
        return self.template.format(pictures + prompt)


# -- tensor helpers (no host syncs) --------------------------------------------------------------


def _branch_names(count: int) -> list[str | None]:
    """Cache-context branch names: one batched CFG forward, or cond then uncond."""
    return ["cfg"] if count == 1 else ["cond", "uncond"]


def _cat(tensors: list[Any]) -> torch.Tensor:
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors, dim=0)


def _pack(latents: torch.Tensor) -> torch.Tensor:
    """[B, C, 1, H, W] or [B, 1, C, H, W] latents -> [B, H/2 * W/2, C*4] 2x2 patches."""
    batch, (height, width) = latents.shape[0], latents.shape[-2:]
    channels = latents.numel() // (batch * height * width)
    x = latents.reshape(batch, channels, height // 2, 2, width // 2, 2)
    x = x.permute(0, 2, 4, 1, 3, 5)
    return x.reshape(batch, (height // 2) * (width // 2), channels * 4)


def _unpack(latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """[B, seq, C*4] -> [B, C, 1, H, W] for the VAE (``height``/``width`` in latent pixels)."""
    batch, _, channels = latents.shape
    x = latents.view(batch, height // 2, width // 2, channels // 4, 2, 2)
    x = x.permute(0, 3, 1, 4, 2, 5)
    return x.reshape(batch, channels // 4, 1, height, width)


def _pad(embeds: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Stack ``[rows, L_i, D]`` prompt embeddings, zero-padded to the longest, plus its mask.

    The mask is ``None`` when every prompt has the same length: the transformer then takes its
    unmasked (fastest) attention path, exactly as the reference does for one prompt.
    """
    lengths = [e.shape[1] for e in embeds]
    longest = max(lengths)
    if all(length == longest for length in lengths):
        return _cat(embeds), None
    padded, masks = [], []
    for e, length in zip(embeds, lengths, strict=True):
        rows = e.shape[0]
        padded.append(torch.cat([e, e.new_zeros(rows, longest - length, e.shape[2])], dim=1))
        mask = torch.zeros(rows, longest, dtype=torch.bool, device=e.device)
        mask[:, :length] = True
        masks.append(mask)
    return torch.cat(padded, dim=0), torch.cat(masks, dim=0)


def _euler(latents: torch.Tensor, velocity: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
    """``FlowMatchEulerDiscreteScheduler.step`` for a batch, rounding exactly as it does.

    The reference computes ``sample.float() + dt * v`` with ``dt`` a 0-dim float32 tensor and
    ``v`` in the model dtype: type promotion keeps the product in the model dtype, with ``dt``
    cast to it first. Python-scalar CFG scales are different (kept in float), see ``step``.
    """
    return (latents.float() + dt.to(velocity.dtype) * velocity).to(velocity.dtype)


def _route(model: Any, options: PipelineOptions) -> dict[str, Any]:
    from omni_core.pipelines.diffusers_attention import route_attention

    report = route_attention(model, options.attention)
    names = dict(options.attention.names) if options.attention is not None else {}
    return {"routed": dict(report.routed), "skipped": list(report.skipped), "backends": names}
