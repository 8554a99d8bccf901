"""The staged runtime every FLUX generation shares: prepare / step / decode around a FLUX
transformer, with what differs between FLUX.1 and FLUX.2 left to hooks. Long because it is the
three stages of one class plus the loading and the batching helpers they share, kept together
so they read top to bottom like diffusers' own ``__call__``.

What is common (and equal to diffusers' pipelines, operation for operation): the seed's noise
from ``torch.Generator("cpu").manual_seed(seed)`` in the prompt embeddings' dtype; the
checkpoint's FlowMatchEulerDiscreteScheduler with ``linspace(1, 1/steps)`` sigmas shifted by the
family's ``mu``; an embedded guidance scale per row where the transformer is guidance-distilled;
classifier-free guidance ``neg + s * (cond - neg)`` with both branches in one forward (every
prompt is padded to ``max_sequence_length``, so the branches always line up); an edit's input
image appended to the image sequence. Requests of one size share each transformer forward.

The hooks (:meth:`_load`, :meth:`_check`, :meth:`_prompt_encoder`, :meth:`_encode`,
:meth:`_cfg`, :meth:`_noise`, :meth:`_text_inputs`, :meth:`_text_ids`, :meth:`_mu`,
:meth:`_to_vae`, :meth:`_condition`) are implemented by :mod:`omni_flux.text_to_image`
(FLUX.1), :mod:`omni_flux.kontext` and :mod:`omni_flux.flux2`.
"""

from __future__ import annotations

import contextlib
import random
import time
from abc import abstractmethod
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from pydantic import BaseModel

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
from omni_flux.latents import cat, cfg_mix, euler
from omni_flux.layout import FluxLayout, is_checked
from omni_flux.memory import read_lora
from omni_flux.prompts import PromptEmbeds

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
    condition: torch.Tensor | None = None  # [rows, seq_img, C*4] (an edit's input image)
    ids: torch.Tensor | None = None  # [seq (+ seq_img), axes] image position ids
    text_ids: torch.Tensor | None = None  # [L, axes] text position ids, on the device
    prompt: PromptEmbeds | None = None
    negative: PromptEmbeds | None = None
    guidance: torch.Tensor | None = None  # [rows] float32 (guidance-distilled checkpoints)
    timesteps: torch.Tensor | None = None  # [steps] float32, device
    dts: torch.Tensor | None = None  # [steps] float32: sigma[i+1] - sigma[i]
    scale: torch.Tensor | None = None  # [rows, 1, 1] float32, the CFG scale
    shape_key: tuple[Any, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


class FluxStagedPipeline(StagedPipeline):
    """A FLUX transformer driven one denoising step at a time (see the module docstring)."""

    extras_model: ClassVar[type[BaseModel]]
    #: Whether the pipeline edits one input image instead of starting from text alone.
    edits: ClassVar[bool] = False
    family: ClassVar[str] = "flux"

    def __init__(self, layout: FluxLayout, components: dict[str, Any], options: PipelineOptions):
        self.layout = layout
        self.options = options
        self.device = options.device
        self.dtype = options.dtype
        self.transformer = components["transformer"]
        self.vae = components["vae"]
        self.scheduler = components["scheduler"]
        self.image_processor = self._image_processor(layout.multiple)
        encoder_device = options.extra.get("text_encoder_device") or options.device
        cache_size = int(options.extra.get("prompt_cache_size", 64))
        self.prompts = self._prompt_encoder(components, encoder_device, cache_size)
        self.routing = _route(self.transformer, options)
        #: Set by from_pretrained: what omni_core.diffusion.acceleration applied (None: nothing).
        self.accel: Any = None
        self.offload: Any = None
        self.vae_memory = VaeMemory(self.vae, options, tile_kwargs={})
        tile = options.memory.vae_tile
        if tile is not None:  # the AutoencoderKLs' tile size is an attribute, not an argument
            self.vae.tile_sample_min_size = tile
            self.vae.tile_latent_min_size = tile // layout.vae_scale_factor

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> FluxStagedPipeline:
        layout, components = cls._load(path, options)
        # LoRA adapters first (a fused distill is plain weights to what follows), then
        # quantization / compile / the step cache (order fixed by apply_acceleration, bounded
        # by options.spec and the transformer's DenoiserSpec), offload last; the transformer
        # is then wrapped for this rank's parallel layout (a no-op outside a worker group).
        transformer = {"transformer": components["transformer"]}
        adapters = AdapterSet.load(transformer, options, read=cls._lora_reader())
        accel = apply_acceleration(transformer, options)
        encoders = tuple(k for k in components if k.startswith("text_encoder"))
        on_own_device = bool(options.extra.get("text_encoder_device"))
        placed = ("transformer", "vae", *(() if on_own_device else encoders))
        offload = apply_offload({k: components[k] for k in placed}, options)
        pipeline = cls(layout, components, options)
        pipeline.accel, pipeline.adapters, pipeline.offload = accel, adapters, offload
        pipeline.transformer = parallelize_denoiser(pipeline.transformer, options.attention)
        return pipeline

    # -- validation (before any compute) ---------------------------------------------------

    @classmethod
    def precheck(cls, path: Path, request: GenerationRequest) -> GenerationRequest:
        return cls._check(FluxLayout.read(path), request)

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        """The checks of :meth:`_check`, once per request (defaults completed, an input image
        decoded; ``prepare`` trusts what this returns)."""
        return self._check(self.layout, request)

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
        cfg, cfg_scale = self._cfg(request, extras)
        seed = request.seed if request.seed is not None else random.randrange(2**63)
        generator = torch.Generator("cpu").manual_seed(seed)
        state = FluxState(request=request, num_steps=steps, rows=rows, height=height, width=width)
        state.cfg = cfg

        hits0 = self.prompts.cache.hits
        t0 = time.perf_counter()
        state.prompt = self._encode(request.prompt, extras, negative=False)
        if cfg:
            state.negative = self._encode(request.negative_prompt or "", extras, negative=True)
        state.timings["encode_prompt_s"] = time.perf_counter() - t0
        state.timings["prompt_cache_hits"] = float(self.prompts.cache.hits - hits0)
        state.timings["prompt_cache_lookups"] = 2.0 if cfg else 1.0
        state.timings["prompt_cache_hit_rate"] = self.prompts.cache.hit_rate

        vsf = self.layout.vae_scale_factor
        lat_h, lat_w = 2 * (height // (vsf * 2)), 2 * (width // (vsf * 2))
        dtype = state.prompt.sequence.dtype  # diffusers draws in the prompt embeddings' dtype
        state.latents, ids = self._noise(rows, lat_h, lat_w, generator, dtype)
        t1 = time.perf_counter()
        condition = self._condition(request, generator)
        cond_key: tuple[int, ...] = ()
        if condition is not None:
            cond_latents, cond_ids = condition
            state.condition = cond_latents.expand(rows, -1, -1)
            ids = torch.cat([ids, cond_ids.to(device=self.device, dtype=ids.dtype)], dim=0)
            cond_key = tuple(cond_latents.shape)
            state.timings["encode_image_s"] = time.perf_counter() - t1
        state.ids = ids
        length = state.prompt.sequence.shape[1]
        state.text_ids = self._text_ids(length).to(device=self.device, dtype=ids.dtype)
        state.shape_key = (lat_h, lat_w, cond_key, length)

        timesteps, sigmas = self._schedule(steps, self._mu(state.latents.shape[1], steps))
        state.timesteps = timesteps.to(self.device)
        sigmas = sigmas.to(self.device)
        state.dts = sigmas[1:] - sigmas[:-1]
        if self.layout.guidance_embeds:
            assert request.guidance_scale is not None  # validate filled it in
            state.guidance = torch.full(
                (rows,), request.guidance_scale, dtype=torch.float32, device=self.device
            )
        state.scale = torch.full((rows, 1, 1), cfg_scale, dtype=torch.float32, device=self.device)
        state.info = {"seed": seed, "cfg": cfg, "guidance_scale": request.guidance_scale}
        state.info.update(self._info(extras))
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
            "hidden_states": model_in.to(self.transformer.dtype),
            "timestep": t.to(latents.dtype) / 1000,
            "guidance": cat([s.guidance for s in group]) if first.guidance is not None else None,
            **self._text_inputs([(s.prompt, s.rows) for s in group]),  # type: ignore[misc]
        }
        if not first.cfg:
            with self._cache_context(group, None):
                out = self._forward(inputs, first)[:, :seq]
        else:
            negative = {**inputs, **self._text_inputs([(s.negative, s.rows) for s in group])}  # type: ignore[misc]
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
        latents = self._to_vae(state)
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

    # -- what each FLUX generation does its own way ----------------------------------------

    @classmethod
    @abstractmethod
    def _load(cls, path: Path, options: PipelineOptions) -> tuple[FluxLayout, dict[str, Any]]:
        """The layout and components (``transformer``, ``vae``, ``scheduler``, ``text_encoder*``
        and whatever the prompt encoder needs) of the checkpoint at ``path``."""

    @classmethod
    @abstractmethod
    def _check(cls, layout: FluxLayout, request: GenerationRequest) -> GenerationRequest:
        """``request`` with its defaults completed, or an InvalidRequestError."""

    @staticmethod
    def _lora_reader() -> Any:
        return read_lora

    def _image_processor(self, multiple: int) -> Any:
        from diffusers.image_processor import VaeImageProcessor

        return VaeImageProcessor(vae_scale_factor=multiple)

    @abstractmethod
    def _prompt_encoder(self, components: dict[str, Any], encoder_device: Any, size: int) -> Any:
        """The prompt encoder (with its LRU ``cache``) over the loaded text encoders."""

    @abstractmethod
    def _encode(self, text: str, extras: Any, *, negative: bool) -> PromptEmbeds:
        """The embeddings of one prompt (or negative prompt)."""

    @abstractmethod
    def _cfg(self, request: GenerationRequest, extras: Any) -> tuple[bool, float]:
        """Whether the request runs classifier-free guidance, and its scale."""

    def _info(self, extras: Any) -> dict[str, Any]:
        return {}

    @abstractmethod
    def _noise(
        self, rows: int, lat_h: int, lat_w: int, generator: torch.Generator, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The packed initial noise ``[rows, seq, C]`` drawn as the reference draws it, and
        its image position ids ``[seq, axes]``."""

    @abstractmethod
    def _text_inputs(self, prompts: list[tuple[PromptEmbeds, int]]) -> dict[str, torch.Tensor]:
        """The transformer's text inputs for a batch of ``(embeddings, rows)``."""

    @abstractmethod
    def _text_ids(self, length: int) -> torch.Tensor:
        """The text position ids ``[length, axes]``."""

    @abstractmethod
    def _mu(self, image_seq_len: int, steps: int) -> float:
        """The resolution (and step) dependent shift of the sigmas."""

    @abstractmethod
    def _to_vae(self, state: FluxState) -> torch.Tensor:
        """Finished latents -> the VAE decoder's input."""

    def _condition(
        self, request: GenerationRequest, generator: torch.Generator
    ) -> Condition | None:
        """The conditioning image's packed latents and ids (none for text-to-image)."""
        return None

    # -- helpers ---------------------------------------------------------------------------

    def _forward(self, inputs: dict[str, Any], first: FluxState) -> torch.Tensor:
        # The states of one step share their size and text length (the batch key), so the
        # first's position ids (made on the device in prepare: no copy here) are everyone's.
        return self.transformer(
            **inputs, txt_ids=first.text_ids, img_ids=first.ids, return_dict=False
        )[0]

    def _cache_context(self, group: list[FluxState], branch: str | None) -> Any:
        """The step cache's context for one forward (a no-op without a cache)."""
        if self.accel is None or not self.accel.caches:
            return contextlib.nullcontext()
        return self.accel.cache_context(
            "transformer", cache_key((s.request.request_id for s in group), branch)
        )

    def _batch_cfg(self) -> bool:
        """Whether classifier-free guidance's two branches share one forward.

        ``options.extra["cfg_batch"]``: ``"auto"`` / ``"always"`` (default: one batched
        forward; every prompt is padded to the same length, so no mask is ever needed; required
        under CFG-parallel, which splits a forward's rows over two ranks) or ``"never"`` (two
        forwards, as diffusers runs them).
        """
        mode = self.options.extra.get("cfg_batch", "auto")
        if mode not in ("auto", "always", "never"):
            raise ConfigError(f"cfg_batch: expected auto, always or never, not {mode!r}")
        return mode != "never" or self.options.parallel.cfg_parallel_size > 1

    def _vae_bytes(self, state: FluxState, rows: int) -> int:
        """The decode's peak estimate: ~4 activations of the VAE's widest full-size layer."""
        width = int(self.vae.config.block_out_channels[0])
        return activation_bytes(rows * state.height * state.width, width, self.vae.dtype.itemsize)

    def _schedule(self, steps: int, mu: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(timesteps, sigmas incl. the final 0) from the checkpoint's scheduler, shifted by mu."""
        import numpy as np

        config = self.scheduler.config
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
