"""HunyuanVideo-1.5 text- and image-to-video on omni's staged runtime, reproducing diffusers'
``HunyuanVideo15Pipeline`` and ``HunyuanVideo15ImageToVideoPipeline``.

What is the reference's, operation for operation: the prompt through diffusers' own two encoders
(``_get_mllm_prompt_embeds``: Qwen2.5-VL's hidden state three layers from the top of the
system-prompted chat, padded to 1000 tokens after the 108-token template crop;
``_get_byt5_prompt_embeds``: ByT5 over the prompt's quoted glyph text, zeros without any), cast
to the transformer's dtype and kept in a small LRU cache; the noise drawn in the transformer's
dtype from ``torch.Generator("cpu").manual_seed(seed)``; ``linspace(1, 0, steps + 1)[:-1]``
sigmas through the checkpoint's shifted FlowMatchEulerDiscreteScheduler; the latents
concatenated with zero condition latents and a zero mask and zero SigLIP image tokens (text to
video), or with the image's VAE latents in the first frame, mask 1 there, and its SigLIP tokens
(image to video, through diffusers' own helpers); the checkpoint guider's CFG
(``uncond + s * (cond - uncond)``, its start / stop window, its rescale) and the Euler step in
float32 cast back to the prediction's dtype; ``latents / scaling`` into the VAE.

The text tokens are padded to fixed lengths, so one transformer forward carries the conditional
and unconditional rows of every request of one video size, at different steps (the timestep is
per row). With a step cache (first-block) each request runs its own forward in its own cache
context instead, so its skip decisions are its own (:meth:`HunyuanVideoPipeline.step`).
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
from omni_hunyuan_video.conditioning import condition_inputs
from omni_hunyuan_video.extras import HunyuanVideoExtras
from omni_hunyuan_video.layout import (
    DEFAULT_FPS,
    HunyuanVideoLayout,
    check_request,
    is_checked,
    parse_extras,
)
from omni_hunyuan_video.loading import load_components
from omni_hunyuan_video.prompts import Prompt, PromptEncoder

#: Step caches that need per-model coefficients, which HunyuanVideo-1.5 has none of.
CALIBRATED_CACHES = ("teacache", "magcache")


@dataclass
class HunyuanVideoState(DenoiseState):
    """One request in flight: one video, its prompt tokens and its schedule."""

    scale: float = 1.0
    latents: torch.Tensor | None = None  # [1, C, F, h, w] in the transformer's dtype
    condition: torch.Tensor | None = None  # [1, C + 1, F, h, w]: image latents and frame mask
    image_embeds: torch.Tensor | None = None  # [1, T, D] SigLIP tokens (zeros: text to video)
    prompt: Prompt | None = None  # (embeds, mask, glyph embeds, glyph mask), one row each
    negative: Prompt | None = None  # the same for the negative prompt (CFG only)
    timesteps: torch.Tensor | None = None  # [steps]
    sigmas: torch.Tensor | None = None  # [steps + 1] float32
    cfg_steps: list[bool] = field(default_factory=list)  # CFG at step i (the guider's window)
    fps: int = DEFAULT_FPS
    timings: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


class HunyuanVideoPipeline(StagedPipeline):
    """HunyuanVideo-1.5 text- or image-to-video (the checkpoint says which), one denoising step
    at a time (see the module docstring)."""

    extras_model: ClassVar[type[HunyuanVideoExtras]] = HunyuanVideoExtras
    load_options: ClassVar[dict[str, str]] = {
        "text_encoder_device": "Where the two text encoders run (e.g. cpu), if not the device.",
        "prompt_cache_size": "Prompt embeddings kept in the LRU cache (default 64; 0: none).",
        "batch_rows": "One transformer forward for every row of a step (default true); false "
        "runs one per row, as diffusers runs CFG's branches (bit-equal in bfloat16 too).",
    }

    def __init__(
        self, layout: HunyuanVideoLayout, components: dict[str, Any], options: PipelineOptions
    ):
        from diffusers.pipelines.hunyuan_video1_5.image_processor import (
            HunyuanVideo15ImageProcessor,
        )

        self.layout = layout
        self.options = options
        self.device = options.device
        self.transformer = components["transformer"]
        #: The transformer's forward as this rank's parallel layout runs it (CFG-parallel: the
        #: ``[cond; uncond]`` rows split over two ranks, set by ``from_pretrained``).
        self.forward: Any = self.transformer
        self.vae = components["vae"]
        self.scheduler = components["scheduler"]
        self.video_processor = HunyuanVideo15ImageProcessor(
            vae_scale_factor=layout.spatial, do_resize=not layout.image_to_video
        )
        self.image_encoder = components.get("image_encoder")
        self.feature_extractor = components.get("feature_extractor")
        self.prompts = PromptEncoder(
            components,
            options.extra.get("text_encoder_device") or options.device,
            int(options.extra.get("prompt_cache_size", 64)),
        )
        report = route_attention(self.transformer, options.attention)
        self.routing = {"routed": dict(report.routed), "skipped": list(report.skipped)}
        self.accel: Any = None
        self.offload: Any = None
        self.batch_rows = str(options.extra.get("batch_rows", True)).lower() not in ("false", "0")
        tile = options.memory.vae_tile
        latent_tile = None if tile is None else max(1, tile // layout.spatial)
        kwargs = (
            {}
            if tile is None
            else {
                "tile_sample_min_height": tile,
                "tile_sample_min_width": tile,
                "tile_latent_min_height": latent_tile,
                "tile_latent_min_width": latent_tile,
            }
        )
        self.vae_memory = VaeMemory(self.vae, options, tile_kwargs=kwargs)

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> HunyuanVideoPipeline:
        if options.cache.backend in CALIBRATED_CACHES:
            raise ConfigError(
                f"cache.backend: {options.cache.backend!r} needs per-model calibration "
                "(TeaCache's polynomial, MagCache's magnitude ratios) that nobody has published "
                "for HunyuanVideo-1.5; use 'first-block', which needs none"
            )
        layout = HunyuanVideoLayout.read(path)
        components = load_components(path, options)
        transformer = {"transformer": components["transformer"]}
        # diffusers has no LoRA loader (no community format converter) for this family, but its
        # transformer takes PEFT adapters: files in diffusers' format load as they are
        adapters = AdapterSet.load(transformer, options)
        accel = apply_acceleration(transformer, options)
        own = bool(options.extra.get("text_encoder_device"))
        encoders = () if own else ("text_encoder", "text_encoder_2")
        placed = ("transformer", "vae", *encoders)
        offload = apply_offload({k: components[k] for k in placed}, options)
        pipeline = cls(layout, components, options)
        pipeline.accel, pipeline.adapters, pipeline.offload = accel, adapters, offload
        # CFG-parallel: a no-op outside a worker group; inside one, each rank runs half the rows
        pipeline.forward = parallelize_denoiser(pipeline.transformer, options.attention)
        return pipeline

    @classmethod
    def precheck(cls, path: Path, request: GenerationRequest) -> GenerationRequest:
        return check_request(HunyuanVideoLayout.read(path), request)

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        return check_request(self.layout, request)

    def output_fps(self, request: GenerationRequest) -> int:
        """24, or the request's ``fps`` extra (also asked of a raw request: the server maps
        OpenAI's ``seconds`` to frames with it before validating)."""
        fps = request.extras.get("fps")
        if fps is None:
            return DEFAULT_FPS
        return parse_extras({"fps": fps}).fps or DEFAULT_FPS

    def denoisers(self) -> dict[str, Any]:
        return {"transformer": self.transformer}

    def warmup_fields(self) -> dict[str, Any]:
        # One step of one frame: the kernels warm up without a 5-second render. Image to video
        # takes the core's grey image and makes its size bucket (a size would be refused).
        fields = {**super().warmup_fields(), "num_frames": 1}
        if not self.layout.image_to_video:
            fields["height"] = fields["width"] = self.layout.spatial * 16
        return fields

    # -- stages ----------------------------------------------------------------------------

    @torch.no_grad()
    def prepare(self, request: GenerationRequest) -> HunyuanVideoState:
        if not is_checked(request):  # the core validated it once; a raw one is checked here
            request = self.validate(request)
        assert request.height and request.width and request.num_frames
        assert request.num_inference_steps
        extras = HunyuanVideoExtras.model_construct(**request.extras)
        steps = request.num_inference_steps
        scale = float(request.guidance_scale if request.guidance_scale is not None else 1.0)
        seed = request.seed if request.seed is not None else random.randrange(2**63)
        cfg = self.layout.cfg_enabled(scale)
        state = HunyuanVideoState(
            request=request, num_steps=steps, scale=scale, fps=extras.fps or DEFAULT_FPS
        )
        hits0 = self.prompts.cache.hits
        t0 = time.perf_counter()
        dtype = self.transformer.dtype
        state.prompt = self.prompts.encode(request.prompt, dtype, self.device)
        if cfg:
            state.negative = self.prompts.encode(request.negative_prompt, dtype, self.device)
        state.timings["encode_prompt_s"] = time.perf_counter() - t0
        state.timings["prompt_cache_hits"] = float(self.prompts.cache.hits - hits0)

        from diffusers.utils.torch_utils import randn_tensor

        layout = self.layout
        shape = (
            1,
            layout.latent_channels,
            (request.num_frames - 1) // layout.temporal + 1,
            request.height // layout.spatial,
            request.width // layout.spatial,
        )
        generator = torch.Generator("cpu").manual_seed(seed)
        state.latents = randn_tensor(shape, generator=generator, device=self.device, dtype=dtype)
        state.condition, state.image_embeds = condition_inputs(self, request, state.latents)
        state.timesteps, state.sigmas = self._schedule(steps)
        guider = layout.guider
        start = int(float(guider.get("start", 0.0)) * steps)
        stop = int(float(guider.get("stop", 1.0)) * steps)
        state.cfg_steps = [cfg and start <= i < stop for i in range(steps)]
        state.info = {"seed": seed, "cfg": cfg, "guidance_scale": scale}
        return state

    def batch_key(self, state: DenoiseState) -> Hashable:
        # Prompts are padded to fixed lengths; CFG, the scale and the step are per row.
        assert isinstance(state, HunyuanVideoState) and state.latents is not None
        return tuple(state.latents.shape[2:])

    @torch.no_grad()
    def step(self, states: list[DenoiseState]) -> None:
        group: list[HunyuanVideoState] = states  # type: ignore[assignment]
        if self.adapters is not None:  # the engine batches one adapter set per step
            self.adapters.activate(group[0].request.lora)
        if self.accel is None or not self.accel.caches:
            self._advance(group, self._run(self._inputs(group), None))
            return
        # A step cache decides per context whether to skip the blocks, and a forward shared by
        # several requests would share one decision (one request's residual deciding another's
        # step): each request runs its own forward in its own context, as it would alone.
        for s in group:
            branch = "cfg" if s.cfg_steps[s.step_index] else "cond"
            self._advance([s], self._run(self._inputs([s]), (s.request.request_id, branch)))

    def _inputs(self, group: list[HunyuanVideoState]) -> dict[str, torch.Tensor]:
        """The transformer's inputs: every conditional row of ``group``, then every
        unconditional one."""
        latents: list[torch.Tensor] = []
        timesteps: list[torch.Tensor] = []
        prompts: list[Prompt] = []
        conditions: list[torch.Tensor] = []
        images: list[torch.Tensor] = []
        meanflow: list[torch.Tensor] = []
        for branch in ("cond", "uncond"):
            for s in group:
                if branch == "uncond" and not s.cfg_steps[s.step_index]:
                    continue
                assert s.latents is not None and s.timesteps is not None
                latents.append(s.latents)
                timesteps.append(s.timesteps[s.step_index : s.step_index + 1])
                prompts.append(s.prompt if branch == "cond" else s.negative)  # type: ignore[arg-type]
                conditions.append(s.condition)  # type: ignore[arg-type]
                images.append(s.image_embeds)  # type: ignore[arg-type]
                last = s.step_index + 1 == s.num_steps
                meanflow.append(
                    s.timesteps[:1] * 0 if last else s.timesteps[s.step_index + 1 :][:1]
                )
        model_input = torch.cat([torch.cat(latents), torch.cat(conditions)], dim=1)
        embeds, masks, glyphs, glyph_masks = (
            torch.cat(parts) for parts in zip(*prompts, strict=True)
        )
        inputs = {
            "hidden_states": model_input,
            "image_embeds": torch.cat(images),
            "timestep": torch.cat(timesteps).to(model_input.dtype),
            "encoder_hidden_states": embeds,
            "encoder_attention_mask": masks,
            "encoder_hidden_states_2": glyphs,
            "encoder_attention_mask_2": glyph_masks,
        }
        if self.transformer.config.get("use_meanflow", False):  # the step-distilled checkpoints
            inputs["timestep_r"] = torch.cat(meanflow).to(latents[0].dtype)
        return inputs

    def _run(self, inputs: dict[str, torch.Tensor], cache: tuple[str, str] | None) -> torch.Tensor:
        """The transformer's prediction for ``inputs``; ``cache`` is the (request id, branch) of
        the step cache's context (None: no cache)."""
        if self.batch_rows:
            with self._cache_context(cache, None):
                return self.forward(**inputs, return_dict=False)[0]
        # A forward per row: low-precision kernels need not be batch-invariant.
        rows = inputs["hidden_states"].shape[0]
        outs = []
        for r in range(rows):
            with self._cache_context(cache, r):
                row = {k: v[r : r + 1] for k, v in inputs.items()}
                outs.append(self.forward(**row, return_dict=False)[0])
        return torch.cat(outs)

    def _cache_context(self, cache: tuple[str, str] | None, row: int | None) -> Any:
        """The step cache's context of one forward: the request, its rows (CFG's two, or the
        conditional one alone) and, run row by row, the row."""
        if cache is None:
            return contextlib.nullcontext()
        request_id, branch = cache
        name = branch if row is None else f"{branch}-{row}"
        return self.accel.cache_context("transformer", cache_key([request_id], name))

    def _advance(self, group: list[HunyuanVideoState], out: torch.Tensor) -> None:
        """The guider's CFG and the Euler step of every state, from the predictions ``out``
        (rows as :meth:`_inputs` lays them out)."""
        rescale = float(self.layout.guider.get("guidance_rescale", 0.0))
        original = bool(self.layout.guider.get("use_original_formulation", False))
        uncond_at = len(group)
        for i, s in enumerate(group):
            pred = out[i : i + 1]
            if s.cfg_steps[s.step_index]:
                cond, uncond = pred, out[uncond_at : uncond_at + 1]
                uncond_at += 1
                pred = (cond if original else uncond) + s.scale * (cond - uncond)
                if rescale > 0.0:
                    from diffusers.guiders.guider_utils import rescale_noise_cfg

                    pred = rescale_noise_cfg(pred, cond, rescale)
            assert s.sigmas is not None and s.latents is not None
            dt = s.sigmas[s.step_index + 1] - s.sigmas[s.step_index]
            s.latents = (s.latents.to(torch.float32) + dt * pred).to(pred.dtype)
            s.step_index += 1

    @torch.no_grad()
    def decode(self, state: DenoiseState) -> GenerationResult:
        assert isinstance(state, HunyuanVideoState) and state.latents is not None
        latents = state.latents.to(self.vae.dtype) / self.vae.config.scaling_factor
        request = state.request
        assert request.height and request.width and request.num_frames
        width = int(self.vae.config.block_out_channels[0])
        pixels = request.num_frames * request.height * request.width
        needed = activation_bytes(pixels, width, self.vae.dtype.itemsize)
        state.info["vae_tiled"] = self.vae_memory.before(needed)
        video = self.vae.decode(latents, return_dict=False)[0]
        frames = self.video_processor.postprocess_video(video, output_type="np")[0]
        array = (frames * 255).round().clip(0, 255).astype("uint8")
        images = None
        if array.shape[0] == 1:  # a one-frame "video" is an image: offer it as one too
            from PIL import Image

            images = [Image.fromarray(array[0])]
        info = {
            **state.info,
            "pipeline": self.spec.name if self.spec else "hunyuan-video-1.5",
            "height": request.height,
            "width": request.width,
            "num_frames": int(array.shape[0]),
            "attention": self.routing,
        }
        if self.accel is not None:
            info["acceleration"] = self.accel.as_dict()
            if self.accel.caches:
                info["step_cache"] = self.accel.finish_request(request.request_id)
        return GenerationResult(
            images=images, video=array, fps=state.fps, timings=dict(state.timings), info=info
        )

    # -- helpers ---------------------------------------------------------------------------

    def _schedule(self, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(timesteps, sigmas incl. the final 0) on the device, as diffusers sets them."""
        import numpy as np

        scheduler = type(self.scheduler).from_config(self.scheduler.config)
        sigmas = np.linspace(1.0, 0.0, steps + 1)[:-1]
        scheduler.set_timesteps(sigmas=sigmas, device=self.device)
        return scheduler.timesteps, scheduler.sigmas
