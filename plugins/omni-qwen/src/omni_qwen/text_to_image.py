"""Qwen-Image text-to-image on omni's staged runtime; the base of the edit pipelines. Long
because it is the three stages of one class plus their helpers, kept together so they read top
to bottom like diffusers' own ``__call__``.

The orchestration of diffusers' ``QwenImagePipeline`` cut into prepare / step / decode: the
models, VAE, scheduler and tokenizer are diffusers' and transformers' own, loaded from the
checkpoint folder; requests of one size share each transformer forward and classifier-free
guidance runs both branches as one batch. The variant hooks (:meth:`_conditions`,
:meth:`_prompt_text`, the template and dropped-prefix length) are what the edit pipelines
(:mod:`omni_qwen.edit`) override.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from omni_core import ConfigError, GenerationRequest, GenerationResult, PipelineOptions
from omni_core.diffusion import (
    AdapterSet,
    DenoiseState,
    LRUCache,
    StagedPipeline,
    VaeMemory,
    activation_bytes,
    apply_acceleration,
    apply_offload,
    cache_key,
    parallelize_denoiser,
    route_attention,
)
from omni_qwen.caches import image_digest
from omni_qwen.extras import QwenImageExtras
from omni_qwen.latents import branch_names, cat, euler, pack, pad, unpack
from omni_qwen.layout import QwenLayout, check_request, is_checked
from omni_qwen.memory import read_lora

T2I_TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, "
    "quantity, text, spatial relationships of the objects and background:<|im_end|>\n"
    "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
)
_TOKENIZER_MAX_LENGTH = 1024


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


class QwenImagePipeline(StagedPipeline):
    """Qwen-Image text-to-image (diffusers' ``QwenImagePipeline``)."""

    extras_model = QwenImageExtras
    load_options: ClassVar[dict[str, str]] = {
        "text_encoder_device": "device of the Qwen2.5-VL text encoder (default: the model's)",
        "prompt_cache_size": "prompt embeddings kept in the LRU cache (default 64)",
        "image_cache_size": "encoded input images kept in the LRU cache (default 16)",
        "cfg_batch": "auto (default), true or false: run true CFG's branches as one forward",
    }
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
        #: Set by from_pretrained: what omni_core.diffusion.acceleration applied (None: nothing).
        self.accel: Any = None
        self.offload: Any = None
        self.vae_memory = VaeMemory(self.vae, options)
        self._encoder_device = options.extra.get("text_encoder_device") or options.device
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
        from omni_qwen.loading import load_components

        layout = QwenLayout.read(path)
        components = load_components(path, layout, options, processor=bool(cls.image_range[1]))
        # Quantization, regional compile and the step cache, as configured (order fixed there,
        # bounded by options.spec and the transformer's DenoiserSpec); then the transformer is
        # wrapped for this rank's parallel layout (a no-op outside a worker group).
        # LoRA adapters first (a fused distill is plain weights to what follows), offload last.
        adapters = AdapterSet.load(
            {"transformer": components["transformer"]}, options, read=read_lora
        )
        accel = apply_acceleration({"transformer": components["transformer"]}, options)
        placed = ("transformer", "vae") + (
            () if options.extra.get("text_encoder_device") else ("text_encoder",)
        )
        offload = apply_offload({k: components[k] for k in placed}, options)
        pipeline = cls(layout, components, options)
        pipeline.accel, pipeline.adapters, pipeline.offload = accel, adapters, offload
        pipeline.transformer = parallelize_denoiser(pipeline.transformer, options.attention)
        return pipeline

    # -- validation (before any compute) ---------------------------------------------------

    @classmethod
    def precheck(cls, path: Path, request: GenerationRequest) -> GenerationRequest:
        return check_request(
            QwenLayout.read(path), request, family=cls.family, image_range=cls.image_range
        )

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        """The checks of :func:`~omni_qwen.layout.check_request`, once per request (defaults
        completed, input images decoded; ``prepare`` trusts what this returns)."""
        return check_request(self.layout, request, family=self.family, image_range=self.image_range)

    def warmup_fields(self) -> dict[str, Any]:
        """One request at the default size with the fewest steps this checkpoint's scheduler
        takes (two with ``shift_terminal``) and, for an edit, the grey input images it needs:
        what :meth:`validate` accepts on every Qwen-Image checkpoint."""
        from PIL import Image

        grey = Image.new("RGB", (64, 64), (128, 128, 128))
        return {
            "prompt": "warm-up",
            "num_inference_steps": self.layout.min_steps,
            "images": [grey] * self.image_range[0],
        }

    def denoisers(self) -> dict[str, Any]:
        return {"transformer": self.transformer}

    # -- stages ----------------------------------------------------------------------------

    @torch.no_grad()
    def prepare(self, request: GenerationRequest) -> QwenState:
        # The core validated the request once; a raw one (benchmarks, tests) is validated here.
        if not is_checked(request):
            request = self.validate(request)
        assert request.height and request.width and request.num_inference_steps
        extras = QwenImageExtras.model_construct(**request.extras)
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
        budget = self._text_budget(height, width, conditions)
        state.prompt_embeds = self._encode(request.prompt, conditions, extras, budget)
        if cfg:
            state.negative_embeds = self._encode(
                request.negative_prompt or "", conditions, extras, budget
            )
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
        state.latents = pack(noise)
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
        if self.adapters is not None:  # the engine batches one adapter set per step
            self.adapters.activate(first.request.lora)
        dtype = first.latents.dtype  # type: ignore[union-attr]
        latents = cat([s.latents for s in group])
        seq = latents.shape[1]
        model_in = latents
        if first.image_latents is not None:
            model_in = torch.cat([latents, cat([s.image_latents for s in group])], dim=1)
        t = cat([s.timesteps[s.step_index].expand(s.rows) for s in group])  # type: ignore[index]
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
        names = branch_names(len(branches)) if first.cfg else [None]
        outputs = []
        for branch, name in zip(branches, names, strict=True):
            encoder_states, mask = pad(branch)
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
        out = cat(outputs)
        if first.cfg:
            cond, neg = out.chunk(2, dim=0)
            scale = cat([s.scale for s in group])
            combined = neg + (scale * (cond - neg).float()).to(dtype)
            cond_norm = torch.norm(cond, dim=-1, keepdim=True)
            comb_norm = torch.norm(combined, dim=-1, keepdim=True)
            out = combined * (cond_norm / comb_norm)
        dt = cat([s.dts[s.step_index].expand(s.rows) for s in group]).view(-1, 1, 1)  # type: ignore[index]
        updated = euler(latents, out, dt)
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
        latents = unpack(state.latents, lat_h, lat_w).to(self.vae.dtype)
        mean = self._latents_mean.to(latents.device, latents.dtype)
        std_inv = 1.0 / self._latents_std.to(latents.device, latents.dtype)
        latents = latents / std_inv + mean
        rows = latents.shape[0]
        state.info["vae_tiled"] = self.vae_memory.before(self._vae_bytes(state, rows), rows)
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

    def _text_budget(self, height: int, width: int, conditions: list[Condition]) -> int | None:
        """How many text positions the transformer's rotary table has left beside the images
        (diffusers' ``QwenEmbedRope``: text positions follow the largest image index): an edit's
        text (prompt and the encoder's image tokens) beyond it cannot be embedded."""
        rope = getattr(self.transformer, "pos_embed", None)
        table = getattr(rope, "pos_freqs", None)
        if table is None or not conditions:
            return None
        vsf = self.layout.vae_scale_factor
        sides = [(height, width), *((h, w) for _, _, (w, h) in conditions)]
        largest = max(max(h // vsf // 2, w // vsf // 2) for h, w in sides)
        start = largest // 2 if getattr(rope, "scale_rope", False) else largest
        return int(table.shape[0]) - start

    def _encode(
        self,
        prompt: str,
        conditions: list[Condition],
        extras: QwenImageExtras,
        budget: int | None = None,
    ) -> torch.Tensor:
        """Prompt embeddings ``[1, L, D]`` (system prefix dropped), through the LRU cache; an
        edit's embeddings are cut at the transformer's text ``budget`` (past it diffusers
        fails; shorter ones are diffusers' own)."""
        key = (
            self._model_key,
            self.family,
            prompt,
            tuple(image_digest(view) for _, view, _ in conditions),
            extras.max_sequence_length if not conditions else budget,
            str(self.dtype),
            str(self.device),
        )
        cached = self.prompt_cache.get(key)
        if cached is not None:
            return cached
        text = self._prompt_text(prompt, len(conditions))
        device = self._encoder_device  # where it runs, also when offloaded
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
        elif budget is not None:
            kept = kept[:budget]
        embeds = kept.unsqueeze(0).to(device=self.device, dtype=self.text_encoder.dtype)
        self.prompt_cache.put(key, embeds)
        return embeds

    def _image_latents(self, image: Any, size: tuple[int, int]) -> torch.Tensor:
        """Normalised, packed VAE latents ``[1, seq, C*4]`` of one input image (cached)."""
        width, height = size
        key = (self._model_key, image_digest(image), size, str(self.dtype), str(self.device))
        cached = self.image_cache.get(key)
        if cached is not None:
            return cached
        pixels = self._vae_pixels(image, height, width).unsqueeze(2)
        pixels = pixels.to(device=self.device, dtype=self.dtype)
        self.vae_memory.before(activation_bytes(height * width, 96, pixels.element_size()))
        latents = self.vae.encode(pixels).latent_dist.mode()
        mean = self._latents_mean.to(latents.device, latents.dtype)
        std = self._latents_std.to(latents.device, latents.dtype)
        latents = (latents - mean) / std
        packed = pack(latents)
        self.image_cache.put(key, packed)
        return packed

    def _vae_bytes(self, state: QwenState, rows: int) -> int:
        """The decode's peak estimate: ~4 activations of the VAE's widest full-size layer."""
        base = int(self.vae.config.get("base_dim", 96))
        return activation_bytes(rows * state.height * state.width, base, self.vae.dtype.itemsize)

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


def _route(model: Any, options: PipelineOptions) -> dict[str, Any]:
    report = route_attention(model, options.attention)
    names = dict(options.attention.names) if options.attention is not None else {}
    return {"routed": dict(report.routed), "skipped": list(report.skipped), "backends": names}
