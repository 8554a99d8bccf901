"""Z-Image text-to-image on omni's staged runtime, reproducing diffusers' ``ZImagePipeline``.

What is the reference's, operation for operation: the prompt in the Qwen3 chat template
(``enable_thinking``), the text encoder's second-to-last hidden state cut to the real tokens;
float32 noise from ``torch.Generator("cpu").manual_seed(seed)``; ``linspace(1, 1/steps)`` sigmas
through the checkpoint's FlowMatchEulerDiscreteScheduler (shifted by the resolution's ``mu``
where it shifts dynamically); the transformer fed lists of latents and captions (it pads them
itself, with masks); CFG ``pos + s * (pos - neg)`` per row in float32 with diffusers'
``cfg_normalization`` cap and ``cfg_truncation`` cut-off; the negated velocity's float32 Euler
step; ``latents / scaling + shift`` into the VAE.

Because the transformer takes lists, one forward carries every row of every request of one size:
with and without CFG, at different steps, with captions of any length. The prompt embeddings are
kept in a small LRU cache (a shared negative prompt is encoded once). The forward goes through
:class:`RowForward` (the rows stacked into one tensor), which is what omni-core's CFG-parallel
batch split cuts: with ``cfg_parallel_size=2`` each rank runs half the rows (a lone CFG request:
the conditional row on one, the unconditional on the other) and both gather every prediction.
With a step cache (first-block, over the joint ``layers``) each request runs its own forward in
its own cache context instead, so its skip decisions are its own (:meth:`ZImagePipeline.step`).
"""

from __future__ import annotations

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
    DenoiserWrapper,
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
from omni_zimage.extras import ZImageExtras
from omni_zimage.layout import ZImageLayout, check_request, is_checked
from omni_zimage.loading import load_components
from omni_zimage.prompts import PromptEncoder

#: Step caches that need per-model coefficients, which Z-Image has none of.
CALIBRATED_CACHES = ("teacache", "magcache")


@dataclass
class ZImageState(DenoiseState):
    """One request in flight: ``rows`` images (num_outputs) denoised together."""

    rows: int = 1
    height: int = 0
    width: int = 0
    scale: float = 0.0  # the CFG scale (diffusers' guidance_scale)
    norm_cap: float = 0.0  # cfg_normalization (0: off)
    latents: torch.Tensor | None = None  # [rows, C, h, w] float32
    prompt: torch.Tensor | None = None  # [L, D] the caption's real tokens
    negative: torch.Tensor | None = None  # [L', D] (CFG only)
    timesteps: torch.Tensor | None = None  # [steps] float32: the transformer's (1000 - t) / 1000
    dts: torch.Tensor | None = None  # [steps] float32: sigma[i+1] - sigma[i]
    cfg_steps: list[bool] = field(default_factory=list)  # CFG at step i (after truncation)
    timings: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


class ZImagePipeline(StagedPipeline):
    """Z-Image-Turbo / Z-Image driven one denoising step at a time (see the module docstring)."""

    extras_model: ClassVar[type[ZImageExtras]] = ZImageExtras
    load_options: ClassVar[dict[str, str]] = {
        "text_encoder_device": "Where the Qwen3 text encoder runs (e.g. cpu), if not the device.",
        "prompt_cache_size": "Prompt embeddings kept in the LRU cache (default 64; 0: none).",
    }

    def __init__(self, layout: ZImageLayout, components: dict[str, Any], options: PipelineOptions):
        from diffusers.image_processor import VaeImageProcessor

        self.layout = layout
        self.options = options
        self.device = options.device
        self.transformer = components["transformer"]
        self.vae = components["vae"]
        self.scheduler = components["scheduler"]
        self.image_processor = VaeImageProcessor(vae_scale_factor=layout.multiple)
        self.prompts = PromptEncoder(
            components["text_encoder"],
            components["tokenizer"],
            options.extra.get("text_encoder_device") or options.device,
            int(options.extra.get("prompt_cache_size", 64)),
        )
        report = route_attention(self.transformer, options.attention)
        self.routing = {"routed": dict(report.routed), "skipped": list(report.skipped)}
        self.accel: Any = None
        self.offload: Any = None
        #: The transformer's forward over stacked rows (wrapped for CFG-parallel by
        #: from_pretrained).
        self.forward: Any = RowForward(self.transformer)
        self.vae_memory = VaeMemory(self.vae, options, tile_kwargs={})
        tile = options.memory.vae_tile
        if tile is not None:  # the AutoencoderKL's tile size is an attribute, not an argument
            self.vae.tile_sample_min_size = tile
            self.vae.tile_latent_min_size = tile // layout.vae_scale_factor

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> ZImagePipeline:
        if options.cache.backend in CALIBRATED_CACHES:
            raise ConfigError(
                f"cache.backend: {options.cache.backend!r} needs per-model calibration "
                "(TeaCache's polynomial, MagCache's magnitude ratios) that nobody has published "
                "for Z-Image; use 'first-block', which needs none"
            )
        layout = ZImageLayout.read(path)
        components = load_components(path, options)
        transformer = {"transformer": components["transformer"]}
        adapters = AdapterSet.load(transformer, options, read=_read_lora)
        accel = apply_acceleration(transformer, options)
        own = bool(options.extra.get("text_encoder_device"))
        placed = ("transformer", "vae", *(() if own else ("text_encoder",)))
        offload = apply_offload({k: components[k] for k in placed}, options)
        pipeline = cls(layout, components, options)
        pipeline.accel, pipeline.adapters, pipeline.offload = accel, adapters, offload
        # The row-wise forward is what this rank's parallel layout wraps (CFG-parallel: a batch
        # split over two ranks); a no-op outside a worker group.
        pipeline.forward = parallelize_denoiser(RowForward(pipeline.transformer), options.attention)
        return pipeline

    @classmethod
    def precheck(cls, path: Path, request: GenerationRequest) -> GenerationRequest:
        return check_request(ZImageLayout.read(path), request)

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        return check_request(self.layout, request)

    def denoisers(self) -> dict[str, Any]:
        return {"transformer": self.transformer}

    # -- stages ----------------------------------------------------------------------------

    @torch.no_grad()
    def prepare(self, request: GenerationRequest) -> ZImageState:
        if not is_checked(request):  # the core validated it once; a raw one is checked here
            request = self.validate(request)
        assert request.height and request.width and request.num_inference_steps
        extras = ZImageExtras.model_construct(**request.extras)
        rows, steps = request.num_outputs, request.num_inference_steps
        scale = float(request.guidance_scale or 0.0)
        seed = request.seed if request.seed is not None else random.randrange(2**63)
        state = ZImageState(
            request=request,
            num_steps=steps,
            rows=rows,
            height=request.height,
            width=request.width,
            scale=scale,
            norm_cap=float(extras.cfg_normalization),
        )
        cfg = scale > 0
        hits0 = self.prompts.cache.hits
        t0 = time.perf_counter()
        state.prompt = self.prompts.encode(request.prompt, extras.max_sequence_length)
        if cfg:
            negative = request.negative_prompt or ""
            state.negative = self.prompts.encode(negative, extras.max_sequence_length)
        state.timings["encode_prompt_s"] = time.perf_counter() - t0
        state.timings["prompt_cache_hits"] = float(self.prompts.cache.hits - hits0)

        from diffusers.utils.torch_utils import randn_tensor

        vsf = self.layout.vae_scale_factor
        lat_h, lat_w = 2 * (state.height // (vsf * 2)), 2 * (state.width // (vsf * 2))
        generator = torch.Generator("cpu").manual_seed(seed)
        shape = (rows, self.layout.latent_channels, lat_h, lat_w)
        state.latents = randn_tensor(
            shape, generator=generator, device=self.device, dtype=torch.float32
        )

        timesteps, sigmas = self._schedule(steps, (lat_h // 2) * (lat_w // 2))
        state.timesteps = (1000 - timesteps) / 1000
        state.dts = sigmas[1:] - sigmas[:-1]
        norms = ((1000 - timesteps.float()) / 1000).tolist()
        state.cfg_steps = [cfg and not norms[i] > extras.cfg_truncation for i in range(steps)]
        state.info = {"seed": seed, "cfg": cfg, "guidance_scale": scale}
        return state

    def batch_key(self, state: DenoiseState) -> Hashable:
        # Everything else (CFG or not, scales, caption lengths, the step) is per row: the
        # transformer takes lists and pads them itself.
        assert isinstance(state, ZImageState) and state.latents is not None
        return tuple(state.latents.shape[2:])

    @torch.no_grad()
    def step(self, states: list[DenoiseState]) -> None:
        group: list[ZImageState] = states  # type: ignore[assignment]
        if self.adapters is not None:  # the engine batches one adapter set per step
            self.adapters.activate(group[0].request.lora)
        if self.accel is None or not self.accel.caches:
            self._advance(group, self.forward(*self._inputs(group)))
            return
        # A step cache decides per context whether to skip the blocks, and a forward shared by
        # several requests would share one decision: each request runs its own forward (its
        # rows, CFG's two branches together) in its own context, as it would alone.
        for s in group:
            branch = "cfg" if s.cfg_steps[s.step_index] else "cond"
            key = cache_key([s.request.request_id], branch)
            with self.accel.cache_context("transformer", key):
                out = self.forward(*self._inputs([s]))
            self._advance([s], out)

    def _inputs(
        self, group: list[ZImageState]
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """The forward's rows: every conditional row of ``group``, then every unconditional one."""
        dtype = self.transformer.dtype
        xs: list[torch.Tensor] = []  # [C, 1, h, w] per row
        ts: list[torch.Tensor] = []
        caps: list[torch.Tensor] = []
        for branch in ("cond", "uncond"):  # every conditional row, then every unconditional one
            for s in group:
                if branch == "uncond" and not s.cfg_steps[s.step_index]:
                    continue
                assert s.latents is not None and s.timesteps is not None
                xs.append(s.latents.to(dtype).unsqueeze(2))
                ts.append(s.timesteps[s.step_index].expand(s.rows))
                cap = s.prompt if branch == "cond" else s.negative
                caps.extend([cap] * s.rows)  # type: ignore[list-item]
        x = xs[0] if len(xs) == 1 else torch.cat(xs)
        t = ts[0] if len(ts) == 1 else torch.cat(ts)
        return x, t, caps

    def _advance(self, group: list[ZImageState], out: torch.Tensor) -> None:
        """CFG and the Euler step of every state from the predictions ``out`` ([rows, C, 1, h,
        w], laid out as :meth:`_inputs` made them)."""
        cond_at, uncond_at = 0, sum(s.rows for s in group)
        for s in group:
            preds = []
            for _ in range(s.rows):
                pos = out[cond_at].float()
                cond_at += 1
                if s.cfg_steps[s.step_index]:
                    neg = out[uncond_at].float()
                    uncond_at += 1
                    pos = _guided(pos, neg, s.scale, s.norm_cap)
                preds.append(pos)
            velocity = -torch.stack(preds, dim=0).squeeze(2)
            assert s.dts is not None and s.latents is not None
            s.latents = s.latents + s.dts[s.step_index] * velocity
            s.step_index += 1

    @torch.no_grad()
    def decode(self, state: DenoiseState) -> GenerationResult:
        assert isinstance(state, ZImageState) and state.latents is not None
        config = self.vae.config
        latents = state.latents.to(self.vae.dtype) / config.scaling_factor + config.shift_factor
        rows = latents.shape[0]
        width = int(config.block_out_channels[0])
        needed = activation_bytes(rows * state.height * state.width, width, self.vae.dtype.itemsize)
        state.info["vae_tiled"] = self.vae_memory.before(needed, rows)
        pixels = self.vae.decode(latents, return_dict=False)[0]
        images = self.image_processor.postprocess(pixels, output_type="pil")
        info = {
            **state.info,
            "pipeline": self.spec.name if self.spec else "z-image",
            "height": state.height,
            "width": state.width,
            "attention": self.routing,
        }
        if self.accel is not None:
            info["acceleration"] = self.accel.as_dict()
            if self.accel.caches:
                info["step_cache"] = self.accel.finish_request(state.request.request_id)
        return GenerationResult(images=list(images), timings=dict(state.timings), info=info)

    # -- helpers ---------------------------------------------------------------------------

    def _schedule(self, steps: int, image_seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(timesteps, sigmas incl. the final 0), float32 on the device, as diffusers sets them."""
        from diffusers.pipelines.z_image.pipeline_z_image import calculate_shift

        config = self.scheduler.config
        mu = calculate_shift(
            image_seq_len,
            config.get("base_image_seq_len", 256),
            config.get("max_image_seq_len", 4096),
            config.get("base_shift", 0.5),
            config.get("max_shift", 1.15),
        )
        scheduler = type(self.scheduler).from_config(config)
        sigmas = torch.linspace(1.0, 1 / steps, steps).tolist()
        scheduler.set_timesteps(sigmas=sigmas, device=self.device, mu=mu)
        return scheduler.timesteps.float(), scheduler.sigmas.float()


class RowForward(DenoiserWrapper):
    """``ZImageTransformer2DModel`` over rows stacked in one tensor: ``(hidden_states [N, C, 1,
    h, w], timestep [N], captions: N tensors) -> [N, C, 1, h, w]``.

    The model takes and returns lists; this shape (the rows first in every argument) is what
    omni-core's batch split (CFG-parallel) cuts and gathers. The rows are the list's items, so
    the numbers are the list call's. A ``DenoiserWrapper``: Ulysses finds the model's sequence
    plan through it.
    """

    def __init__(self, model: Any) -> None:
        self.model = model

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def __call__(
        self, hidden_states: torch.Tensor, timestep: torch.Tensor, captions: list[torch.Tensor]
    ) -> torch.Tensor:
        out = self.model(list(hidden_states.unbind(0)), timestep, captions, return_dict=False)[0]
        return torch.stack(out, dim=0)


def _guided(pos: torch.Tensor, neg: torch.Tensor, scale: float, cap: float) -> torch.Tensor:
    """diffusers' CFG for one row (float32), with its norm cap, and no host synchronisation."""
    pred = pos + scale * (pos - neg)
    if cap > 0.0:
        limit = torch.linalg.vector_norm(pos) * cap
        norm = torch.linalg.vector_norm(pred)
        pred = pred * torch.where(norm > limit, limit / norm, torch.ones_like(norm))
    return pred


def _read_lora(path: Path) -> tuple[dict[str, Any], Any]:
    """A LoRA file as diffusers' ``ZImagePipeline`` reads it (community formats converted)."""
    from diffusers import ZImagePipeline as Reference

    return Reference.lora_state_dict(
        str(path.parent), weight_name=path.name, return_lora_metadata=True
    )
