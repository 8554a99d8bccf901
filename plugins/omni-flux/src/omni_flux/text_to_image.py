"""FLUX.1 text-to-image on omni's staged runtime; the base of the Kontext edit pipeline. Long
because it is the three stages of one class plus their helpers, kept together so they read top
to bottom like diffusers' own ``__call__``.

The orchestration of diffusers' ``FluxPipeline`` cut into prepare / step / decode: the models,
VAE, scheduler and tokenizers are diffusers' and transformers' own, loaded from the checkpoint
folder; requests of one size share each transformer forward and true CFG runs both branches
as one batch (T5 pads every prompt to ``max_sequence_length``, so the branches always line up).
The maths is the reference's, operation for operation, so the same seed gives the same pixels:

* CLIP's pooled output and T5's sequence embed the prompt; text position ids are zeros;
* noise is drawn as ``[n, C, H/8, W/8]`` from ``torch.Generator("cpu").manual_seed(seed)`` in
  the text encoder's dtype and packed into 2x2 patches; the sigmas are
  ``linspace(1, 1/steps)`` shifted with the resolution-dependent ``mu`` by the checkpoint's
  FlowMatchEulerDiscreteScheduler (FLUX.1-schnell's config has no dynamic shift);
* ``guidance_scale`` is the embedded guidance of guidance-distilled checkpoints (dev, Kontext);
  true CFG (``true_cfg_scale`` > 1 with a negative prompt) is ``neg + s * (cond - neg)``.

The variant hooks (:meth:`_condition`, ``edits``, the extras model) are what the Kontext
pipeline (:mod:`omni_flux.kontext`) overrides.
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
    StagedPipeline,
    VaeMemory,
    activation_bytes,
    apply_acceleration,
    apply_offload,
    cache_key,
    parallelize_denoiser,
    route_attention,
)
from omni_flux.extras import FluxExtras
from omni_flux.latents import cat, cfg_mix, euler, image_ids, pack, unpack
from omni_flux.layout import DEFAULT_GUIDANCE, FluxLayout, check_request, is_checked
from omni_flux.memory import read_lora
from omni_flux.prompts import FluxPromptEncoder, PromptEmbeds

#: A request's conditioning image: packed latents ``[1, seq, C*4]`` and their position ids.
Condition = tuple[torch.Tensor, torch.Tensor]


@dataclass
class FluxState(DenoiseState):
    """One request in flight: ``rows`` images (num_outputs) denoised together."""

    rows: int = 1
    height: int = 0
    width: int = 0
    cfg: bool = False
    latents: torch.Tensor | None = None  # [rows, seq, C*4], model dtype
    condition: torch.Tensor | None = None  # [rows, seq_img, C*4] (Kontext's input image)
    ids: torch.Tensor | None = None  # [seq (+ seq_img), 3] image position ids
    prompt: PromptEmbeds | None = None
    negative: PromptEmbeds | None = None
    guidance: torch.Tensor | None = None  # [rows] float32 (guidance-distilled checkpoints)
    timesteps: torch.Tensor | None = None  # [steps] float32, device
    dts: torch.Tensor | None = None  # [steps] float32: sigma[i+1] - sigma[i]
    scale: torch.Tensor | None = None  # [rows, 1, 1] float32, the true-CFG scale
    shape_key: tuple[Any, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


class FluxImagePipeline(StagedPipeline):
    """FLUX.1-dev / schnell text-to-image (diffusers' ``FluxPipeline``)."""

    extras_model: ClassVar[type[FluxExtras]] = FluxExtras
    load_options: ClassVar[dict[str, str]] = {
        "text_encoder_device": "device of the CLIP and T5 text encoders (default: the model's)",
        "prompt_cache_size": "encoded prompts kept in the LRU cache (default 64)",
        "cfg_batch": "auto (default) / always: true CFG's two branches in one forward; never: "
        "two forwards per step, as diffusers runs them",
    }
    #: Whether the pipeline edits one input image (Kontext) instead of starting from text alone.
    edits: ClassVar[bool] = False
    family: ClassVar[str] = "flux"

    def __init__(self, layout: FluxLayout, components: dict[str, Any], options: PipelineOptions):
        from diffusers.image_processor import VaeImageProcessor

        self.layout = layout
        self.options = options
        self.device = options.device
        self.dtype = options.dtype
        self.transformer = components["transformer"]
        self.vae = components["vae"]
        self.text_encoder = components["text_encoder"]
        self.text_encoder_2 = components["text_encoder_2"]
        self.scheduler = components["scheduler"]
        self.image_processor = VaeImageProcessor(vae_scale_factor=layout.multiple)
        encoder_device = options.extra.get("text_encoder_device") or options.device
        self.prompts = FluxPromptEncoder(
            components,
            options.device,
            encoder_device,
            int(options.extra.get("prompt_cache_size", 64)),
        )
        self.routing = _route(self.transformer, options)
        #: Set by from_pretrained: what omni_core.diffusion.acceleration applied (None: nothing).
        self.accel: Any = None
        self.offload: Any = None
        self.vae_memory = VaeMemory(self.vae, options, tile_kwargs={})
        tile = options.memory.vae_tile
        if tile is not None:  # AutoencoderKL's tile size is an attribute, not a tiling argument
            self.vae.tile_sample_min_size = tile
            self.vae.tile_latent_min_size = tile // layout.vae_scale_factor

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> FluxImagePipeline:
        from omni_flux.loading import load_components

        layout = FluxLayout.read(path)
        components = load_components(path, options)
        # LoRA adapters first (a fused distill is plain weights to what follows), then
        # quantization / compile / the step cache (order fixed by apply_acceleration, bounded
        # by options.spec and the transformer's DenoiserSpec), offload last; the transformer
        # is then wrapped for this rank's parallel layout (a no-op outside a worker group).
        transformer = {"transformer": components["transformer"]}
        adapters = AdapterSet.load(transformer, options, read=read_lora)
        accel = apply_acceleration(transformer, options)
        placed = ("transformer", "vae") + (
            () if options.extra.get("text_encoder_device") else ("text_encoder", "text_encoder_2")
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
            FluxLayout.read(path),
            request,
            family=cls.family,
            extras_model=cls.extras_model,
            edits=cls.edits,
        )

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        """The checks of :func:`~omni_flux.layout.check_request`, once per request (defaults
        completed, the input image decoded; ``prepare`` trusts what this returns)."""
        return check_request(
            self.layout,
            request,
            family=self.family,
            extras_model=self.extras_model,
            edits=self.edits,
        )

    def denoisers(self) -> dict[str, Any]:
        return {"transformer": self.transformer}

    # -- stages ----------------------------------------------------------------------------

    @torch.no_grad()
    def prepare(self, request: GenerationRequest) -> FluxState:
        # The core validated the request once; a raw one (benchmarks, tests) is validated here.
        if not is_checked(request, self.extras_model):
            request = self.validate(request)
        assert request.height and request.width and request.num_inference_steps
        extras = self.extras_model.model_construct(**request.extras)
        rows, steps = request.num_outputs, request.num_inference_steps
        height, width = request.height, request.width
        cfg = extras.true_cfg_scale > 1 and request.negative_prompt is not None
        seed = request.seed if request.seed is not None else random.randrange(2**63)
        generator = torch.Generator("cpu").manual_seed(seed)
        state = FluxState(request=request, num_steps=steps, rows=rows, height=height, width=width)
        state.cfg = cfg

        hits0 = self.prompts.cache.hits
        t0 = time.perf_counter()
        length = extras.max_sequence_length
        state.prompt = self.prompts.encode(request.prompt, extras.prompt_2, length)
        if cfg:
            negative = request.negative_prompt or ""
            state.negative = self.prompts.encode(negative, extras.negative_prompt_2, length)
        state.timings["encode_prompt_s"] = time.perf_counter() - t0
        state.timings["prompt_cache_hits"] = float(self.prompts.cache.hits - hits0)
        state.timings["prompt_cache_lookups"] = 2.0 if cfg else 1.0
        state.timings["prompt_cache_hit_rate"] = self.prompts.cache.hit_rate

        from diffusers.utils.torch_utils import randn_tensor

        vsf = self.layout.vae_scale_factor
        lat_h, lat_w = 2 * (height // (vsf * 2)), 2 * (width // (vsf * 2))
        dtype = state.prompt.sequence.dtype  # diffusers draws in the prompt embeddings' dtype
        noise = randn_tensor(
            (rows, self.layout.latent_channels, lat_h, lat_w),
            generator=generator,
            device=self.device,
            dtype=dtype,
        )
        state.latents = pack(noise)
        ids = image_ids(lat_h // 2, lat_w // 2).to(device=self.device, dtype=dtype)
        t1 = time.perf_counter()
        condition = self._condition(request, generator)
        cond_key: tuple[int, ...] = ()
        if condition is not None:
            cond_latents, cond_ids = condition
            state.condition = cond_latents.expand(rows, -1, -1)
            ids = torch.cat([ids, cond_ids.to(device=self.device, dtype=dtype)], dim=0)
            cond_key = tuple(cond_latents.shape)
            state.timings["encode_image_s"] = time.perf_counter() - t1
        state.ids = ids
        state.shape_key = (lat_h, lat_w, cond_key, length)

        timesteps, sigmas = self._schedule(steps, state.latents.shape[1])
        state.timesteps = timesteps.to(self.device)
        sigmas = sigmas.to(self.device)
        state.dts = sigmas[1:] - sigmas[:-1]
        if self.layout.guidance_embeds:
            guidance = request.guidance_scale
            guidance = DEFAULT_GUIDANCE if guidance is None else guidance
            state.guidance = torch.full((rows,), guidance, dtype=torch.float32, device=self.device)
        state.scale = torch.full(
            (rows, 1, 1), extras.true_cfg_scale, dtype=torch.float32, device=self.device
        )
        state.info = {
            "seed": seed,
            "cfg": cfg,
            "guidance_scale": request.guidance_scale,
            "true_cfg_scale": extras.true_cfg_scale,
        }
        return state

    def batch_key(self, state: DenoiseState) -> Hashable:
        assert isinstance(state, FluxState)
        return (state.shape_key, state.cfg)

    @torch.no_grad()
    def step(self, states: list[DenoiseState]) -> None:
        group: list[FluxState] = states  # type: ignore[assignment]
        first = group[0]
        if self.adapters is not None:  # the engine batches one adapter set per step
            self.adapters.activate(first.request.lora)
        latents = cat([s.latents for s in group])
        seq = latents.shape[1]
        model_in = latents
        if first.condition is not None:
            model_in = torch.cat([latents, cat([s.condition for s in group])], dim=1)
        t = cat([s.timesteps[s.step_index].expand(s.rows) for s in group])  # type: ignore[index]
        inputs = {
            "hidden_states": model_in,
            "timestep": t.to(latents.dtype) / 1000,
            "guidance": cat([s.guidance for s in group]) if first.guidance is not None else None,
            "pooled_projections": cat([s.prompt.pooled.expand(s.rows, -1) for s in group]),  # type: ignore[union-attr]
            "encoder_hidden_states": cat(
                [s.prompt.sequence.expand(s.rows, -1, -1) for s in group]  # type: ignore[union-attr]
            ),
        }
        if not first.cfg:
            with self._cache_context(group, None):
                out = self._forward(inputs, first)[:, :seq]
        else:
            negative = {
                **inputs,
                "pooled_projections": cat([s.negative.pooled.expand(s.rows, -1) for s in group]),  # type: ignore[union-attr]
                "encoder_hidden_states": cat(
                    [s.negative.sequence.expand(s.rows, -1, -1) for s in group]  # type: ignore[union-attr]
                ),
            }
            if self._batch_cfg():
                both = {
                    k: None if v is None else torch.cat([v, negative[k]], dim=0)
                    for k, v in inputs.items()
                }
                with self._cache_context(group, "cfg"):
                    cond, uncond = self._forward(both, first)[:, :seq].chunk(2, dim=0)
            else:
                with self._cache_context(group, "cond"):
                    cond = self._forward(inputs, first)[:, :seq]
                with self._cache_context(group, "uncond"):
                    uncond = self._forward(negative, first)[:, :seq]
            out = cfg_mix(cond, uncond, cat([s.scale for s in group]))
        dt = cat([s.dts[s.step_index].expand(s.rows) for s in group]).view(-1, 1, 1)  # type: ignore[index]
        updated = euler(latents, out, dt)
        offset = 0
        for s in group:
            s.latents = updated[offset : offset + s.rows]
            offset += s.rows
            s.step_index += 1

    @torch.no_grad()
    def decode(self, state: DenoiseState) -> GenerationResult:
        assert isinstance(state, FluxState) and state.latents is not None
        vsf = self.layout.vae_scale_factor
        lat_h, lat_w = 2 * (state.height // (vsf * 2)), 2 * (state.width // (vsf * 2))
        latents = unpack(state.latents, lat_h, lat_w)
        config = self.vae.config
        latents = (latents / config.scaling_factor) + config.shift_factor
        rows = latents.shape[0]
        state.info["vae_tiled"] = self.vae_memory.before(self._vae_bytes(state, rows), rows)
        pixels = self.vae.decode(latents.to(self.vae.dtype), return_dict=False)[0]
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

    def _forward(self, inputs: dict[str, Any], first: FluxState) -> torch.Tensor:
        txt_ids = torch.zeros(inputs["encoder_hidden_states"].shape[1], 3)
        return self.transformer(
            **inputs,
            txt_ids=txt_ids.to(device=self.device, dtype=self.text_encoder.dtype),
            img_ids=first.ids,
            return_dict=False,
        )[0]

    def _condition(
        self, request: GenerationRequest, generator: torch.Generator
    ) -> Condition | None:
        """The conditioning image's packed latents and ids (none for text-to-image)."""
        return None

    def _cache_context(self, group: list[FluxState], branch: str | None) -> Any:
        """The step cache's context for one forward (a no-op without a cache)."""
        if self.accel is None or not self.accel.caches:
            return contextlib.nullcontext()
        return self.accel.cache_context(
            "transformer", cache_key((s.request.request_id for s in group), branch)
        )

    def _batch_cfg(self) -> bool:
        """Whether true CFG's two branches share one forward.

        ``options.extra["cfg_batch"]``: ``"auto"`` / ``"always"`` (default: one batched
        forward; T5 pads every prompt to the same length, so no mask is ever needed; required
        under CFG-parallel, which splits a forward's rows over two ranks) or ``"never"`` (two
        forwards, as diffusers runs them: bit-equal to it, slower).
        """
        mode = self.options.extra.get("cfg_batch", "auto")
        if mode not in ("auto", "always", "never"):
            raise ConfigError(f"cfg_batch: expected auto, always or never, not {mode!r}")
        return mode != "never" or self.options.parallel.cfg_parallel_size > 1

    def _vae_bytes(self, state: FluxState, rows: int) -> int:
        """The decode's peak estimate: ~4 activations of the VAE's widest full-size layer."""
        width = int(self.vae.config.block_out_channels[0])
        return activation_bytes(rows * state.height * state.width, width, self.vae.dtype.itemsize)

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
        if config.get("use_flow_sigmas"):  # the scheduler makes its own sigmas, as in diffusers
            scheduler.set_timesteps(steps, device="cpu", mu=mu)
        else:
            sigmas = np.linspace(1.0, 1 / steps, steps)
            scheduler.set_timesteps(sigmas=sigmas, device="cpu", mu=mu)
        return scheduler.timesteps.to(torch.float32), scheduler.sigmas.to(torch.float32)


def _route(model: Any, options: PipelineOptions) -> dict[str, Any]:
    report = route_attention(model, options.attention)
    names = dict(options.attention.names) if options.attention is not None else {}
    return {"routed": dict(report.routed), "skipped": list(report.skipped), "backends": names}
