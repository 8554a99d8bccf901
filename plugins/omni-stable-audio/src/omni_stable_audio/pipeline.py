"""Stable Audio Open text to audio on omni's staged runtime, reproducing diffusers'
``StableAudioPipeline``.

What is the reference's, operation for operation: the prompt through the T5 tokenizer padded
to its ``model_max_length`` and the T5 encoder, projected and masked; a negative prompt the
same way (its padding zeroed before the projection); the clip's start and end seconds through
the projection's number conditioners, appended to the text tokens and (concatenated) as the
global token; without a negative prompt the unconditional tokens are zeros. The noise is drawn
in the model's dtype from ``torch.Generator("cpu").manual_seed(seed)`` at the DiT's full
``sample_size``, times the scheduler's ``init_noise_sigma``; each request steps its own
``CosineDPMSolverMultistepScheduler`` (an SDE solver: its Brownian-tree noise is seeded by the
same seed), CFG is ``uncond + s * (cond - uncond)`` when ``guidance_scale > 1``; the Oobleck VAE
decodes every latent frame and the waveform is cut to ``[start, end)``.

Every clip is denoised at the same latent length and the text tokens are padded to one length,
so one DiT forward carries every row of every request in flight: with and without CFG, at
different steps (the timestep is per row), for clips of any duration. With a step cache
(first-block) each request runs its own forward in its own cache context instead, so its skip
decisions are its own (:meth:`StableAudioPipeline.step`).

LoRA adapters (per request, or one fused at load) go through the core's ``AdapterSet`` on the
DiT loaded with diffusers' PEFT integration (:mod:`omni_stable_audio.lora`); a step's requests
share one adapter set (the engine's step key), activated at the top of :meth:`step`.
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
    DenoiseState,
    StagedPipeline,
    apply_acceleration,
    apply_offload,
    cache_key,
    dtype_kwargs,
    load_device,
    parallelize_denoiser,
    route_attention,
)
from omni_stable_audio.extras import StableAudioExtras
from omni_stable_audio.layout import StableAudioLayout, check_request, is_checked

#: Step caches that need per-model coefficients, which Stable Audio's DiT has none of.
CALIBRATED_CACHES = ("teacache", "magcache")


@dataclass
class StableAudioState(DenoiseState):
    """One request in flight: one clip, its tokens and its own scheduler."""

    cfg: bool = False
    scale: float = 0.0
    start_s: float = 0.0
    end_s: float = 0.0
    latents: torch.Tensor | None = None  # [1, C, frames] in the model's dtype
    cond: torch.Tensor | None = None  # [1, L + 2, D]: text tokens + start + end seconds
    uncond: torch.Tensor | None = None  # [1, L + 2, D] (CFG only)
    global_states: torch.Tensor | None = None  # [1, 1, 2D]: start and end seconds
    scheduler: Any = None
    generator: torch.Generator | None = None
    timings: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


class StableAudioPipeline(StagedPipeline):
    """Stable Audio Open driven one denoising step at a time (see the module docstring)."""

    extras_model: ClassVar[type[StableAudioExtras]] = StableAudioExtras

    def __init__(
        self, layout: StableAudioLayout, components: dict[str, Any], options: PipelineOptions
    ):
        from diffusers.models.embeddings import get_1d_rotary_pos_embed

        self.layout = layout
        self.options = options
        self.device = options.device
        self.transformer = components["transformer"]
        #: The DiT's forward as this rank's parallel layout runs it (CFG-parallel: the
        #: ``[uncond; cond]`` rows split over two ranks, set by ``from_pretrained``).
        self.forward: Any = self.transformer
        self.vae = components["vae"]
        self.text_encoder = components["text_encoder"]
        self.projection = components["projection_model"]
        self.tokenizer = components["tokenizer"]
        self.scheduler = components["scheduler"]
        report = route_attention(self.transformer, options.attention)
        self.routing = {"routed": dict(report.routed), "skipped": list(report.skipped)}
        self.accel: Any = None
        self.offload: Any = None
        # As diffusers builds it: on the CPU, for the latent frames plus the global token.
        self.rotary = get_1d_rotary_pos_embed(
            self.transformer.config.attention_head_dim // 2,
            layout.latent_frames + 1,
            use_real=True,
            repeat_interleave_real=False,
        )

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> StableAudioPipeline:
        if options.cache.backend in CALIBRATED_CACHES:
            raise ConfigError(
                f"cache.backend: {options.cache.backend!r} needs per-model calibration "
                "(TeaCache's polynomial, MagCache's magnitude ratios) that nobody has published "
                "for Stable Audio's DiT; use 'first-block', which needs none"
            )
        from omni_stable_audio.lora import lora_reader

        layout = StableAudioLayout.read(path)
        components = _load_components(path, options)
        transformer = {"transformer": components["transformer"]}
        # diffusers has no LoRA loader for this family, but the DiT loads with its PEFT
        # integration (StableAudioLoraDiT): diffusers-format files load as they are, before
        # quantization and compile see the weights
        read = lora_reader(components["transformer"])
        adapters = AdapterSet.load(transformer, options, read=read)
        accel = apply_acceleration(transformer, options)
        placed = ("text_encoder", "projection_model", "transformer", "vae")
        offload = apply_offload({k: components[k] for k in placed}, options)
        pipeline = cls(layout, components, options)
        pipeline.accel, pipeline.adapters, pipeline.offload = accel, adapters, offload
        # CFG-parallel: a no-op outside a worker group; inside one, each rank runs half the rows
        pipeline.forward = parallelize_denoiser(pipeline.transformer, options.attention)
        return pipeline

    @classmethod
    def precheck(cls, path: Path, request: GenerationRequest) -> GenerationRequest:
        return check_request(StableAudioLayout.read(path), request)

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        return check_request(self.layout, request)

    def denoisers(self) -> dict[str, Any]:
        return {"transformer": self.transformer}

    def warmup_fields(self) -> dict[str, Any]:
        # Two steps: the second-order solver's first two steps differ (first, then second order).
        return {"prompt": "warm-up", "num_inference_steps": 2}

    # -- stages ----------------------------------------------------------------------------

    @torch.no_grad()
    def prepare(self, request: GenerationRequest) -> StableAudioState:
        if not is_checked(request):  # the core validated it once; a raw one is checked here
            request = self.validate(request)
        assert request.num_inference_steps and request.duration_s is not None
        steps = request.num_inference_steps
        scale = float(request.guidance_scale or 0.0)
        seed = request.seed if request.seed is not None else random.randrange(2**63)
        start = float(request.audio_start_s or 0.0)
        state = StableAudioState(
            request=request,
            num_steps=steps,
            cfg=scale > 1.0,
            scale=scale,
            start_s=start,
            end_s=start + float(request.duration_s),
        )
        t0 = time.perf_counter()
        negative = request.negative_prompt if state.cfg else None
        text, negative_text = self._encode_text(request.prompt, negative)
        seconds = self.projection(
            start_seconds=torch.tensor([state.start_s]).to(self.device),
            end_seconds=torch.tensor([state.end_s]).to(self.device),
        )
        start_h, end_h = seconds.seconds_start_hidden_states, seconds.seconds_end_hidden_states
        state.cond = torch.cat([text, start_h, end_h], dim=1)
        state.global_states = torch.cat([start_h, end_h], dim=2)
        if state.cfg:
            if negative_text is None:
                state.uncond = torch.zeros_like(state.cond)
            else:
                state.uncond = torch.cat([negative_text, start_h, end_h], dim=1)
        state.timings["encode_prompt_s"] = time.perf_counter() - t0

        from diffusers.utils.torch_utils import randn_tensor

        scheduler = type(self.scheduler).from_config(self.scheduler.config)
        scheduler.set_timesteps(steps, device=self.device)
        state.scheduler = scheduler
        state.generator = torch.Generator("cpu").manual_seed(seed)
        shape = (1, self.layout.latent_channels, self.layout.latent_frames)
        noise = randn_tensor(
            shape, generator=state.generator, device=self.device, dtype=state.cond.dtype
        )
        state.latents = noise * scheduler.init_noise_sigma
        state.info = {"seed": seed, "cfg": state.cfg, "guidance_scale": scale}
        return state

    def batch_key(self, state: DenoiseState) -> Hashable:
        # Every clip has the DiT's latent length and padded text tokens: one key per model.
        assert isinstance(state, StableAudioState) and state.cond is not None
        return tuple(state.cond.shape[1:])

    @torch.no_grad()
    def step(self, states: list[DenoiseState]) -> None:
        group: list[StableAudioState] = states  # type: ignore[assignment]
        if self.adapters is not None:  # the engine batches one adapter set per step
            self.adapters.activate(group[0].request.lora)
        if self.accel is None or not self.accel.caches:
            self._advance(group, self._predict(group))
            return
        # A step cache decides per context whether to skip the blocks, and a forward shared by
        # several requests would share one decision (one request's residual deciding another's
        # step): each request runs its own forward in its own context, as it would alone.
        for s in group:
            name = cache_key([s.request.request_id], "cfg" if s.cfg else "cond")
            with self.accel.cache_context("transformer", name):
                out = self._predict([s])
            self._advance([s], out)

    def _predict(self, group: list[StableAudioState]) -> torch.Tensor:
        """One DiT forward over every row of ``group`` (``[uncond; cond]`` per CFG request)."""
        xs, ts, tokens, globals_ = [], [], [], []
        for s in group:
            t = s.scheduler.timesteps[s.step_index]
            both = [s.latents, s.latents] if s.cfg else [s.latents]
            xs.append(s.scheduler.scale_model_input(torch.cat(both), t))
            ts.append(t.reshape(1).expand(len(both)))
            tokens.extend([s.uncond, s.cond] if s.cfg else [s.cond])
            globals_.extend([s.global_states] * len(both))
        timestep = torch.cat(ts)
        if bool((timestep == timestep[0]).all()):  # one timestep: diffusers' [1], broadcast
            timestep = timestep[:1]
        return self.forward(
            torch.cat(xs),
            timestep,
            encoder_hidden_states=torch.cat(tokens),
            global_hidden_states=torch.cat(globals_),
            rotary_embedding=self.rotary,
            return_dict=False,
        )[0]

    def _advance(self, group: list[StableAudioState], out: torch.Tensor) -> None:
        """CFG and each state's own scheduler step, from the predictions ``out``."""
        at = 0
        for s in group:
            if s.cfg:
                uncond, cond = out[at : at + 1], out[at + 1 : at + 2]
                at += 2
                pred = uncond + s.scale * (cond - uncond)
            else:
                pred = out[at : at + 1]
                at += 1
            t = s.scheduler.timesteps[s.step_index]
            s.latents = s.scheduler.step(pred, t, s.latents, generator=s.generator).prev_sample
            s.step_index += 1

    @torch.no_grad()
    def decode(self, state: DenoiseState) -> GenerationResult:
        assert isinstance(state, StableAudioState) and state.latents is not None
        t0 = time.perf_counter()
        waveform = self.vae.decode(state.latents).sample  # [1, channels, frames * hop]
        rate = self.layout.sample_rate
        waveform = waveform[:, :, int(state.start_s * rate) : int(state.end_s * rate)]
        audio = waveform[0].float().cpu().numpy().T.copy()  # [samples, channels]
        info = {
            **state.info,
            "pipeline": self.spec.name if self.spec else "stable-audio",
            "audio_start_s": state.start_s,
            "duration_s": state.end_s - state.start_s,
            "channels": int(audio.shape[1]),
            "attention": self.routing,
        }
        if self.accel is not None:
            info["acceleration"] = self.accel.as_dict()
            if self.accel.caches:
                info["step_cache"] = self.accel.finish_request(state.request.request_id)
        timings = {**state.timings, "vae_decode_s": time.perf_counter() - t0}
        return GenerationResult(audio=audio, sample_rate=rate, timings=timings, info=info)

    # -- helpers ---------------------------------------------------------------------------

    def _encode_text(
        self, text: str, negative: str | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """diffusers' ``encode_prompt`` for one prompt and its negative: ([1, L, D], [1, L, D] or
        None) projected, padding zeroed. As there, each prompt is encoded alone, the negative's
        padding is zeroed before the projection and both are projected in one batch."""
        hidden, masks = [], []
        for i, prompt in enumerate([text] if negative is None else [negative, text]):
            tokens = self.tokenizer(
                [prompt],
                padding="max_length",
                max_length=self.tokenizer.model_max_length,
                truncation=True,
                return_tensors="pt",
            )
            ids = tokens.input_ids.to(self.device)
            mask = tokens.attention_mask.to(self.device)
            states = self.text_encoder(ids, attention_mask=mask)[0]
            if negative is not None and i == 0:
                states = torch.where(mask.to(torch.bool).unsqueeze(2), states, 0.0)
            hidden.append(states)
            masks.append(mask)
        mask = torch.cat(masks)
        projected = self.projection(text_hidden_states=torch.cat(hidden)).text_hidden_states
        projected = projected * mask.unsqueeze(-1).to(projected.dtype)
        if negative is None:
            return projected, None
        return projected[1:], projected[:1]


def _load_components(path: Path, options: PipelineOptions) -> dict[str, Any]:
    """diffusers' and transformers' own classes, as ``StableAudioPipeline.from_pretrained``
    loads them, safetensors only; the DiT with diffusers' PEFT methods added
    (:class:`~omni_stable_audio.lora.StableAudioLoraDiT`: the same weights and forward)."""
    import json

    import transformers
    from diffusers import (
        AutoencoderOobleck,
        CosineDPMSolverMultistepScheduler,
        StableAudioProjectionModel,
    )

    from omni_stable_audio.lora import StableAudioLoraDiT

    scheduler = json.loads((path / "scheduler" / "scheduler_config.json").read_text())
    if scheduler.get("_class_name") != "CosineDPMSolverMultistepScheduler":
        raise ConfigError(
            f"{path}: Stable Audio runs diffusers' CosineDPMSolverMultistepScheduler, found "
            f"{scheduler.get('_class_name')!r}"
        )
    device, dtype = load_device(options), options.dtype
    weights = {"use_safetensors": True}

    def diffusers_model(cls: Any, name: str) -> Any:
        return cls.from_pretrained(path / name, **dtype_kwargs(dtype), **weights).to(device).eval()

    return {
        "transformer": diffusers_model(StableAudioLoraDiT, "transformer"),
        "vae": diffusers_model(AutoencoderOobleck, "vae"),
        "projection_model": diffusers_model(StableAudioProjectionModel, "projection_model"),
        "text_encoder": transformers.T5EncoderModel.from_pretrained(
            path / "text_encoder", dtype=dtype, **weights
        )
        .to(device)
        .eval(),
        "tokenizer": transformers.AutoTokenizer.from_pretrained(path / "tokenizer"),
        "scheduler": CosineDPMSolverMultistepScheduler.from_pretrained(path / "scheduler"),
    }
