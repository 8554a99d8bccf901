"""LTX-2 text- and image-to-video with its audio track on omni's staged runtime, reproducing
diffusers' ``LTX2Pipeline`` and ``LTX2ImageToVideoPipeline``.

What is the reference's, operation for operation: the prompt through diffusers' own Gemma 3
encoding and the text connectors (:mod:`omni_ltx.prompts`); the video noise and then the audio
noise drawn in float32 from ``torch.Generator("cpu").manual_seed(seed)`` and packed as
diffusers packs them; ``linspace(1, 1/steps, steps)`` sigmas through the checkpoint's
FlowMatchEulerDiscreteScheduler with the dynamic shift of the video's token count; the video
and audio positions for the request's frame rate; every guidance term of diffusers' loop
(:mod:`omni_ltx.guidance`); for image to video the image (H.264-recompressed as diffusers does)
VAE-encoded into the first latent frame, kept clean (its tokens' timestep is 0 and the step
leaves them); then the video VAE, and the audio VAE and vocoder for the sound track.

The text tokens are padded to a fixed length, so one transformer forward carries the
conditional and unconditional rows of every request of one size, at different steps; the
modality-isolation and spatio-temporal passes change the whole forward, so each is one more
forward for the rows that need it. STG on a transformer without perturbable attention in its
STG blocks (LTX-2.0) is an identity, which omni skips rather than computing.
"""

from __future__ import annotations

import contextlib
import functools
import random
import time
from collections.abc import Hashable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from omni_core import GenerationRequest, GenerationResult, PipelineOptions
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
from omni_ltx.denoiser import attention_role
from omni_ltx.extras import LTXExtras
from omni_ltx.forward import Forward, Row, run_forward
from omni_ltx.guidance import Predictions, Scales, guided_step
from omni_ltx.layout import LTXLayout, check_request, is_checked, parse_extras
from omni_ltx.loading import load_components
from omni_ltx.prompts import Prompt, PromptEncoder
from omni_ltx.setup import Setup, prepare_setup


@dataclass
class LTXState(DenoiseState):
    """One request in flight: its video and audio latents, prompts, schedule and scales."""

    setup: Setup | None = None
    prompt: Prompt | None = None
    negative: Prompt | None = None  # CFG only
    video: Scales | None = None
    audio: Scales | None = None
    cfg: bool = False
    stg: bool = False
    isolate: bool = False
    timings: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


class LTXPipeline(StagedPipeline):
    """LTX-2 text- or image-to-video with sound (the checkpoint says which), one denoising step
    at a time (see the module docstring)."""

    extras_model: ClassVar[type[LTXExtras]] = LTXExtras
    load_options: ClassVar[dict[str, str]] = {
        "text_encoder_device": "Where Gemma 3 and the connectors run (e.g. cpu), if not the "
        "device.",
        "prompt_cache_size": "Prompt embeddings kept in the LRU cache (default 64; 0: none).",
        "max_sequence_length": "Prompt tokens (default 1024, diffusers' default).",
        "batch_rows": "One transformer forward for every row of a step (default true); false "
        "runs one per row (bit-equal to diffusers' separate passes in bfloat16 too).",
    }

    def __init__(self, layout: LTXLayout, components: dict[str, Any], options: PipelineOptions):
        from diffusers.video_processor import VideoProcessor

        self.layout = layout
        self.options = options
        self.device = options.device
        self.transformer = components["transformer"]
        self.vae = components["vae"]
        self.audio_vae = components["audio_vae"]
        self.vocoder = components["vocoder"]
        self.scheduler = components["scheduler"]
        self.text_encoder = components["text_encoder"]
        self.video_processor = VideoProcessor(vae_scale_factor=layout.spatial)
        self.prompts = PromptEncoder(
            components,
            options.extra.get("text_encoder_device") or options.device,
            int(options.extra.get("prompt_cache_size", 64)),
            int(options.extra.get("max_sequence_length", 1024)),
        )
        report = route_attention(self.transformer, options.attention, role_fn=attention_role)
        self.routing = {"routed": dict(report.routed), "skipped": list(report.skipped)}
        self.accel: Any = None
        self.adapters: AdapterSet | None = None
        self.offload: Any = None
        self.batch_rows = str(options.extra.get("batch_rows", True)).lower() not in ("false", "0")
        tile = options.memory.vae_tile
        kwargs = {}
        if tile is not None:  # LTX's VAE tiles overlap by 1/8 (its defaults: 512, stride 448)
            stride = tile - tile // 8
            kwargs = {
                "tile_sample_min_height": tile,
                "tile_sample_min_width": tile,
                "tile_sample_stride_height": stride,
                "tile_sample_stride_width": stride,
            }
        self.vae_memory = VaeMemory(self.vae, options, tile_kwargs=kwargs)

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> LTXPipeline:
        layout = LTXLayout.read(path)
        components = load_components(path, options)
        transformer = {"transformer": components["transformer"]}
        adapters = AdapterSet.load(transformer, options, read=_read_lora)
        accel = apply_acceleration(transformer, options)
        own = bool(options.extra.get("text_encoder_device"))
        encoders = () if own else ("text_encoder", "connectors")
        placed = ("transformer", "vae", "audio_vae", "vocoder", *encoders)
        offload = apply_offload({k: components[k] for k in placed}, options)
        pipeline = cls(layout, components, options)
        pipeline.accel, pipeline.adapters, pipeline.offload = accel, adapters, offload
        # This rank's parallel layout (CFG-parallel splits each forward's rows; a no-op alone).
        pipeline.transformer = parallelize_denoiser(pipeline.transformer, options.attention)
        return pipeline

    @classmethod
    def precheck(cls, path: Path, request: GenerationRequest) -> GenerationRequest:
        return check_request(LTXLayout.read(path), request)

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        return check_request(self.layout, request)

    def output_fps(self, request: GenerationRequest) -> int:
        """The request's ``fps`` extra, 24 by default (also asked of a raw request: the server
        maps OpenAI's ``seconds`` to frames with it before validating)."""
        return parse_extras({"fps": request.extras.get("fps", 24)}).fps

    def denoisers(self) -> dict[str, Any]:
        return {"transformer": self.transformer}

    def warmup_fields(self) -> dict[str, Any]:
        # The fewest steps of one latent frame at the smallest size: a cheap warm-up.
        side = max(32, self.layout.spatial)
        fields = {**super().warmup_fields(), "num_frames": 1, "height": side, "width": side}
        fields["num_inference_steps"] = max(self.layout.min_steps, 1)
        return fields

    # -- stages ----------------------------------------------------------------------------

    @torch.no_grad()
    def prepare(self, request: GenerationRequest) -> LTXState:
        if not is_checked(request):  # the core validated it once; a raw one is checked here
            request = self.validate(request)
        assert request.num_inference_steps is not None and request.guidance_scale is not None
        extras = LTXExtras.model_construct(**request.extras)
        seed = request.seed if request.seed is not None else random.randrange(2**63)
        guidance = float(request.guidance_scale)
        video = Scales(guidance, extras.stg_scale, extras.modality_scale, extras.guidance_rescale)
        audio = Scales(  # diffusers: ``audio_x or x``
            extras.audio_guidance_scale or guidance,
            extras.audio_stg_scale or extras.stg_scale,
            extras.audio_modality_scale or extras.modality_scale,
            extras.audio_guidance_rescale or extras.guidance_rescale,
        )
        state = LTXState(request=request, num_steps=request.num_inference_steps)
        state.video, state.audio = video, audio
        state.cfg = video.cfg > 1.0 or audio.cfg > 1.0
        state.stg = (video.stg > 0.0 or audio.stg > 0.0) and self._perturbable(extras.stg_blocks)
        state.isolate = video.modality > 1.0 or audio.modality > 1.0
        hits0 = self.prompts.cache.hits
        t0 = time.perf_counter()
        state.prompt = self.prompts.encode(request.prompt, self.device)
        if state.cfg:
            state.negative = self.prompts.encode(request.negative_prompt, self.device)
        state.timings["encode_prompt_s"] = time.perf_counter() - t0
        state.timings["prompt_cache_hits"] = float(self.prompts.cache.hits - hits0)
        state.setup = prepare_setup(self, request, extras, seed)
        state.info = {"seed": seed, "cfg": state.cfg, "guidance_scale": guidance}
        return state

    def batch_key(self, state: DenoiseState) -> Hashable:
        # Prompts are padded to one length; CFG, the scales and the step are per row.
        assert isinstance(state, LTXState) and state.setup is not None
        return state.setup.shape_key

    @torch.no_grad()
    def step(self, states: list[DenoiseState]) -> None:
        group: list[LTXState] = states  # type: ignore[assignment]
        if self.adapters is not None:  # the engine batches one adapter set per step
            self.adapters.activate(group[0].request.lora)
        setup = group[0].setup
        assert setup is not None
        # (forward, [(state index, which prediction)]): the main pass carries every
        # conditional then every unconditional row; STG passes (one per set of STG blocks)
        # and the modality-isolation pass carry the conditional rows of the states using them.
        plan: list[tuple[Forward, list[tuple[int, str]]]] = []
        main = [(i, "cond") for i in range(len(group))]
        main += [(i, "uncond") for i, s in enumerate(group) if s.cfg]
        plan.append((Forward([]), main))
        by_blocks: dict[tuple[int, ...], list[tuple[int, str]]] = {}
        for i, s in enumerate(group):
            if s.stg:
                blocks = tuple(s.request.extras["stg_blocks"])
                by_blocks.setdefault(blocks, []).append((i, "perturbed"))
        plan += [(Forward([], stg_blocks=b), rows) for b, rows in by_blocks.items()]
        isolated = [(i, "isolated") for i, s in enumerate(group) if s.isolate]
        if isolated:
            plan.append((Forward([], isolate=True), isolated))
        videos = [Predictions(torch.empty(0)) for _ in group]
        audios = [Predictions(torch.empty(0)) for _ in group]
        for forward, rows in plan:
            for i, which in rows:
                s = group[i]
                prompt = s.negative if which == "uncond" else s.prompt
                row = Row(s.setup, s.step_index, prompt, s.request.request_id, which)  # type: ignore[arg-type]
                forward.rows.append(row)
            context = functools.partial(self._cache_context, forward)
            video, audio = run_forward(self.transformer, forward, setup, self.batch_rows, context)
            for r, (i, which) in enumerate(rows):
                setattr(videos[i], which, video[r : r + 1])
                setattr(audios[i], which, audio[r : r + 1])
        for s, video, audio in zip(group, videos, audios, strict=True):
            self._advance(s, video, audio)

    @torch.no_grad()
    def decode(self, state: DenoiseState) -> GenerationResult:
        from omni_ltx.decoding import decode_audio, decode_video

        assert isinstance(state, LTXState) and state.setup is not None
        request = state.request
        assert request.height and request.width and request.num_frames
        width = int(self.vae.config.decoder_block_out_channels[0])
        pixels = request.num_frames * request.height * request.width
        state.info["vae_tiled"] = self.vae_memory.before(
            activation_bytes(pixels, width, self.vae.dtype.itemsize)
        )
        array = decode_video(self, state.setup, request.extras)
        sound, rate = decode_audio(self, state.setup)
        images = None
        if array.shape[0] == 1:  # a one-frame "video" is an image: offer it as one too
            from PIL import Image

            images = [Image.fromarray(array[0])]
        info = {
            **state.info,
            "pipeline": self.spec.name if self.spec else "ltx-2",
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
            images=images,
            video=array,
            fps=state.setup.fps,
            audio=sound,
            sample_rate=rate,
            timings=dict(state.timings),
            info=info,
        )

    # -- helpers ---------------------------------------------------------------------------

    def _cache_context(self, forward: Forward, rows: list[Row]) -> AbstractContextManager[None]:
        """The step cache's context of one transformer call: its requests, pass and rows (a
        batch of another make-up, or another pass, never shares cached residuals)."""
        if self.accel is None or not self.accel.caches:
            return contextlib.nullcontext()
        ids = dict.fromkeys(r.request_id for r in rows)
        rows_key = "+".join(dict.fromkeys(r.which for r in rows))
        return self.accel.cache_context(
            "transformer", cache_key(ids, f"{forward.branch}-{rows_key}")
        )

    def _perturbable(self, blocks: list[int]) -> bool:
        """Whether STG changes anything: some STG block exists and has perturbable attention."""
        config = self.transformer.config
        return bool(config.get("perturbed_attn", False)) and any(
            0 <= b < int(config.num_layers) for b in blocks
        )

    def _advance(self, s: LTXState, video: Predictions, audio: Predictions) -> None:
        setup = s.setup
        assert setup is not None and s.video is not None and s.audio is not None
        i = s.step_index
        sigma, dt = setup.sigmas[i], setup.sigmas[i + 1] - setup.sigmas[i]
        latents = guided_step(setup.latents, video, s.video, sigma, dt)
        if setup.mask is not None:  # image to video: the image's frame stays as encoded
            latents = torch.where(setup.mask[..., None] > 0, setup.latents, latents)
        setup.latents = latents
        setup.audio_latents = guided_step(setup.audio_latents, audio, s.audio, sigma, dt)
        s.step_index += 1


def _read_lora(path: Path) -> tuple[dict[str, Any], Any]:
    """A LoRA file as diffusers' LTX-2 pipelines read it (their converters included)."""
    from diffusers import LTX2Pipeline as Reference

    return Reference.lora_state_dict(
        str(path.parent), weight_name=path.name, return_lora_metadata=True
    )
