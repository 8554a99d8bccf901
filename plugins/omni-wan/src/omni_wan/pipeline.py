"""Wan 2.1 / 2.2 on omni's staged runtime: prepare / step / decode around diffusers' models.

The models are diffusers' and transformers' own classes (``WanTransformer3DModel``,
``AutoencoderKLWan``, ``UMT5EncoderModel``, ``CLIPVisionModel``) loaded from the checkpoint; the
scheduler is the one its ``scheduler_config.json`` names, turned into a precomputed
:class:`~omni_core.diffusion.schedule.ScheduleTable` so that :meth:`WanVideoPipeline.step` has
no host synchronisation. What this module adds is the orchestration diffusers' ``WanPipeline`` /
``WanImageToVideoPipeline`` do inside one ``__call__``, cut into stages, with two speed-ups that
change no numbers beyond float rounding: classifier-free guidance runs the conditional and
unconditional passes as one batched forward, and compatible requests share that forward.

One class serves every variant; ``model_index.json`` says which:

- ``WanPipeline`` (Wan2.1 T2V 1.3B / 14B; Wan2.2 T2V-A14B with ``transformer_2`` and
  ``boundary_ratio``; Wan2.2 TI2V-5B with ``expand_timesteps``, text or text+image);
- ``WanImageToVideoPipeline`` (Wan2.1 I2V with a CLIP image encoder; Wan2.2 I2V-A14B).

Long because it is the three stages of one class, kept together so they read top to bottom like
diffusers' own ``__call__``. Everything else is cut out by job: the checkpoint
layout and request checks (:mod:`omni_wan.layout`), loading (:mod:`omni_wan.loading`), the text
and image encoders and the VAE (:mod:`omni_wan.encoders`), mixed-step batching
(:mod:`omni_wan.batching`) and what acceleration/parallelism know about the transformer
(:mod:`omni_wan.denoiser`).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Hashable
from pathlib import Path
from typing import Any, ClassVar

import torch

from omni_core import (
    ConfigError,
    GenerationRequest,
    GenerationResult,
    InvalidRequestError,
    PipelineOptions,
)
from omni_core.diffusion import (
    AdapterSet,
    DenoiseState,
    ScheduleTable,
    StagedPipeline,
    VaeMemory,
    apply_acceleration,
    apply_offload,
    cache_key,
    parallelize_denoiser,
    route_attention,
)
from omni_wan.batching import apply_weights, stack_slot, weights_tensor
from omni_wan.encoders import WanEncoders
from omni_wan.extras import WanExtras
from omni_wan.layout import WanLayout, is_checked, parse_extras
from omni_wan.memory import read_lora

#: cfg_batch="auto": batch CFG's branches while one forward holds at most this many tokens.
CFG_BATCH_MAX_TOKENS = 16384


class WanVideoPipeline(StagedPipeline):
    """Every Wan 2.1 / 2.2 variant, text- and image-to-video, one denoising step at a time."""

    extras_model = WanExtras
    load_options: ClassVar[dict[str, str]] = {
        "vae_dtype": "dtype of the VAE (default float32, as diffusers' Wan pipelines)",
        "cfg_batch": "auto (default), true or false: run CFG's two branches as one forward",
    }

    def __init__(self, layout: WanLayout, components: dict[str, Any], options: PipelineOptions):
        self.layout = layout
        self.options = options
        self.device = options.device
        self.dtype = options.dtype
        # Text encoder, tokenizer and VAE may be absent when prompt embeddings are given
        # (prepare_embedded) and decoding is not needed, e.g. in step benchmarks.
        self.encoders = WanEncoders(components, layout, options.device, options.dtype)
        self.scheduler = components["scheduler"]
        #: The denoisers by component name: one expert, or Wan2.2 A14B's high-noise
        #: ``transformer`` and low-noise ``transformer_2``, in the order the experts run.
        self.experts = [n for n in ("transformer", "transformer_2") if components.get(n)]
        self.transformers = [components[n] for n in self.experts]
        self.routing = [_route(m, options) for m in self.transformers]
        self._tables: dict[tuple[int, float | None], ScheduleTable] = {}
        #: options.extra["cfg_batch"]: True runs CFG's two branches as one batched forward,
        #: False as two forwards (diffusers' way: half the activation memory), "auto" (default)
        #: batches while the forward stays small enough to gain from it (CFG_BATCH_MAX_TOKENS):
        #: at video sizes one forward already saturates the GPU, and batching measured 1% slower
        #: on an H200 (Wan2.2-TI2V-5B, 27k tokens) for 5 GiB more memory.
        self.cfg_batch: bool | str = _cfg_batch(options.extra.get("cfg_batch", "auto"))
        if options.parallel.cfg_parallel_size > 1:
            # CFG parallelism splits the batched [cond; uncond] rows across its two ranks.
            self.cfg_batch = True
        #: What omni_core.diffusion.acceleration applied (set by from_pretrained; None: nothing).
        self.accel: Any = None
        self.offload: Any = None
        if self.encoders.vae is not None:
            self.encoders.vae_memory = VaeMemory(self.encoders.vae, options)

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> WanVideoPipeline:
        from omni_wan.loading import load_components

        components = load_components(path, options)
        experts = {n: components.get(n) for n in ("transformer", "transformer_2")}
        # LoRA into every expert first (a fused distill is plain weights to what follows).
        adapters = AdapterSet.load(experts, options, read=read_lora)
        pipeline = cls(WanLayout.read(path), components, options)  # routes attention first
        pipeline.adapters = adapters
        # Fused QKV, quantization, regional compile, step cache (what the Wan DenoiserSpec of
        # omni_wan.denoiser allows); then each expert is wrapped for this rank's parallel
        # layout (a no-op outside a worker group).
        pipeline.accel = apply_acceleration(
            {n: components.get(n) for n in ("transformer", "transformer_2")}, options
        )
        placed = (*experts, "text_encoder", "image_encoder", "vae")
        pipeline.offload = apply_offload({n: components.get(n) for n in placed}, options)
        pipeline.transformers = [
            parallelize_denoiser(m, options.attention) for m in pipeline.transformers
        ]
        return pipeline

    @classmethod
    def precheck(cls, path: Path, request: GenerationRequest) -> GenerationRequest:
        return WanLayout.read(path).check(request)

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        """The layout's checks, once per request: defaults completed, extras parsed and dumped
        (``prepare`` trusts what this returns)."""
        return self.layout.check(request)

    def warmup_fields(self) -> dict[str, Any]:
        """One step at the default size, or at the smallest where this checkpoint does not take
        the default (:meth:`WanLayout.warmup_size`); an I2V checkpoint's grey image."""
        return {**super().warmup_fields(), **self.layout.warmup_size()}

    def output_fps(self, request: GenerationRequest) -> int:
        """24 for Wan2.2 TI2V-5B, 16 for the others, or the request's ``fps`` extra.

        Also asked for a raw request (the server maps ``seconds`` to frames before validating),
        so a given ``fps`` is checked as ``validate`` would check it.
        """
        fps = request.extras.get("fps")
        if fps is None:
            return self.layout.default_fps
        return parse_extras({"fps": fps}).fps or self.layout.default_fps

    def work_units(self, request: GenerationRequest) -> float | None:
        """Pixel-steps over the latent frames the transformer denoises ((frames - 1) / 4 + 1):
        a 241-frame clip is 61 latent frames, not 48 times the warm-up's 5 (2 latent frames),
        so the server's run-time estimate does not refuse clips that would finish."""
        if not (request.width and request.height and request.num_inference_steps):
            return None
        frames = request.num_frames or 1
        latent = (frames - 1) // self.layout.vae_temporal + 1
        steps = request.num_inference_steps * (request.num_outputs or 1)
        return float(request.width * request.height * latent * steps)

    def denoisers(self) -> dict[str, Any]:
        return dict(zip(self.experts, self.transformers, strict=True))

    # -- stages ----------------------------------------------------------------------------

    @torch.no_grad()
    def prepare(self, request: GenerationRequest) -> DenoiseState:
        from diffusers.pipelines.wan.pipeline_wan import prompt_clean

        request, extras = self._checked(request)
        cfg = float(request.guidance_scale or 0.0) > 1.0
        texts = [request.prompt] + ([request.negative_prompt or ""] if cfg else [])
        # As diffusers' Wan pipelines: ftfy-fixed, whitespace-collapsed prompts.
        texts = [prompt_clean(text) for text in texts]
        embeds = self.encoders.text(texts, extras.max_sequence_length, self.transformers[0].dtype)
        return self._start(request, extras, embeds)

    @torch.no_grad()
    def prepare_embedded(self, request: GenerationRequest, embeds: torch.Tensor) -> DenoiseState:
        """:meth:`prepare` with the text already encoded: ``embeds`` is ``[1 or 2, L, D]``
        (prompt, then negative prompt when guidance > 1), as the T5 encoder would give it.
        ``request`` may be raw (benchmarks build it by hand): it is validated here if needed."""
        request, extras = self._checked(request)
        return self._start(request, extras, embeds)

    def _checked(self, request: GenerationRequest) -> tuple[GenerationRequest, WanExtras]:
        """``request`` as :meth:`validate` returns it, with its extras typed.

        The core validates every request once before ``prepare``; such a request is trusted as
        is (no second layout check, no second extras parse). Anything else, a raw request from
        a benchmark or a test, is validated here first.
        """
        if not is_checked(request):
            request = self.validate(request)
        return request, WanExtras.model_construct(**request.extras)

    def _start(
        self, request: GenerationRequest, extras: WanExtras, embeds: torch.Tensor
    ) -> DenoiseState:
        """Noise, conditioning latents and the schedule of a validated request."""
        layout = self.layout
        height, width, frames = request.height, request.width, request.num_frames
        assert height and width and frames and request.num_inference_steps
        guidance = float(request.guidance_scale or 0.0)
        cfg = guidance > 1.0
        if embeds.shape[0] != (2 if cfg else 1):
            raise InvalidRequestError(
                f"expected {2 if cfg else 1} prompt embeddings, got {embeds.shape[0]}",
                param="prompt",
            )
        embeds = embeds.to(self.device, self.transformers[0].dtype)
        seed = request.seed if request.seed is not None else random.randrange(2**63)
        generator = torch.Generator("cpu").manual_seed(seed)

        image = request.images[0] if request.images else None
        image_embeds = None
        if image is not None and self.encoders.image_encoder is not None:
            image_embeds = self.encoders.image(image, self.transformers[0].dtype)

        channels = (
            layout.z_dim if layout.image_to_video or image is not None else layout.in_channels
        )
        lat_frames = (frames - 1) // layout.vae_temporal + 1
        lat_h, lat_w = height // layout.vae_spatial, width // layout.vae_spatial
        shape = (1, channels, lat_frames, lat_h, lat_w)
        # As diffusers' randn_tensor does with a CPU generator: draw on the CPU, then move.
        latents = torch.randn(shape, generator=generator, dtype=torch.float32).to(self.device)

        data: dict[str, Any] = {
            "seed": seed,
            "cfg": cfg,
            "embeds": embeds,
            "image_embeds": image_embeds,
            "samples": [latents],
            "outputs": [],
            "condition": None,
            "frame_mask": None,
            "ts_mask": None,
        }
        if image is not None:
            condition = self.encoders.condition(image, height, width, frames)
            if layout.expand_timesteps:
                mask = torch.ones(1, 1, lat_frames, lat_h, lat_w, device=self.device)
                mask[:, :, 0] = 0
                data["frame_mask"] = mask
                data["condition"] = condition
            else:
                # Which latent frames are given: the first one, on all temporal sub-channels.
                mask = torch.zeros(
                    1, layout.vae_temporal, lat_frames, lat_h, lat_w, device=condition.device
                )
                mask[:, :, 0] = 1
                data["condition"] = torch.cat([mask, condition], dim=1)
        if layout.expand_timesteps and data["frame_mask"] is not None:
            # TI2V with an image: the first frame's tokens are at timestep 0, the rest at t, so
            # the transformer needs one timestep per token (as diffusers passes it).
            frame_mask = data["frame_mask"]
            data["ts_mask"] = frame_mask[0][0][:, :: layout.patch[1], :: layout.patch[2]].flatten()
        # TI2V text-only: diffusers passes the same t for every token, which makes the model
        # build and re-read a [batch, tokens, 6, dim] float32 modulation tensor in every block
        # (GBs at 720p). One t per sample gives the same numbers (broadcast instead of
        # repeated), so ts_mask stays None and step() passes a 1-D timestep.

        table = self._table(request.num_inference_steps, extras.flow_shift)
        boundary = (
            extras.boundary_ratio if extras.boundary_ratio is not None else layout.boundary_ratio
        )
        guidance_2 = extras.guidance_scale_2 if extras.guidance_scale_2 is not None else guidance
        if layout.two_experts and boundary is not None:
            edge = boundary * table.num_train_timesteps
            experts = [0 if t >= edge else 1 for t in table.timesteps]
        else:
            experts = [0] * table.num_steps
        scales = [guidance if e == 0 else guidance_2 for e in experts]
        data.update(
            table=table,
            timesteps=table.timesteps_tensor(self.device),
            experts=experts,
            guidance=scales,
            fps=extras.fps or layout.default_fps,
            # Device copies made once here, so that states at different steps (or with
            # different guidance) can share a step with no host-to-device copy in step().
            guidance_t=torch.tensor(scales, dtype=torch.float32).to(self.device),
            weights_t=weights_tensor(table).to(self.device),
        )
        return DenoiseState(request=request, num_steps=table.num_steps, data=data)

    def batch_key(self, state: DenoiseState) -> Hashable:
        d = state.data
        latents = d["samples"][0]
        # The step index is not part of the key: states at different steps share a forward
        # (per-sample timesteps and scheduler weights), which is what continuous batching needs.
        return (
            tuple(latents.shape),
            tuple(d["embeds"].shape[1:]),  # max_sequence_length sets the text length
            id(d["table"]),
            d["cfg"],
            d["experts"][min(state.step_index, state.num_steps - 1)],
            d["condition"] is not None,
            d["frame_mask"] is not None,
            d["image_embeds"] is not None,
        )

    @torch.no_grad()
    def step(self, states: list[DenoiseState]) -> None:
        first = states[0].data
        n = states[0].step_index
        if self.adapters is not None:  # the engine batches one adapter set per step
            self.adapters.activate(states[0].request.lora)
        table: ScheduleTable = first["table"]
        model = self.transformers[first["experts"][n]]
        model_dtype = model.dtype
        one = len(states) == 1
        # Lockstep (the usual case): one timestep and host-float scheduler weights. Otherwise
        # each sample has its own timestep and weights, gathered from the device tables.
        lockstep = all(s.step_index == n for s in states)

        def gather(key: str) -> torch.Tensor:
            items = [s.data[key] for s in states]
            return items[0] if one else torch.cat(items)

        latents = (
            states[0].data["samples"][0]
            if one
            else torch.cat([s.data["samples"][0] for s in states])
        )
        if first["frame_mask"] is not None:
            mask = first["frame_mask"]
            model_input = (1 - mask) * gather("condition") + mask * latents
        elif first["condition"] is not None:
            model_input = torch.cat([latents, gather("condition")], dim=1)
        else:
            model_input = latents
        model_input = model_input.to(model_dtype)
        batch = model_input.shape[0]
        image_embeds = gather("image_embeds") if first["image_embeds"] is not None else None
        if lockstep:
            t = first["timesteps"][n]
            if first["ts_mask"] is not None:
                timestep = (first["ts_mask"] * t).unsqueeze(0).expand(batch, -1)
            else:
                timestep = t.expand(batch)
        else:
            t = torch.stack([s.data["timesteps"][s.step_index] for s in states])
            if first["ts_mask"] is not None:
                timestep = first["ts_mask"].unsqueeze(0) * t.unsqueeze(1)
            else:
                timestep = t
        component = "transformer" if first["experts"][n] == 0 else "transformer_2"
        ids = [s.request.request_id for s in states]

        def forward(text: torch.Tensor, repeat: int, branch: str | None) -> torch.Tensor:
            def twice(x: torch.Tensor | None) -> torch.Tensor | None:
                return x if x is None or repeat == 1 else torch.cat([x] * repeat)

            with self._cache_context(component, ids, branch):
                return model(
                    hidden_states=twice(model_input),
                    timestep=twice(timestep),
                    encoder_hidden_states=text,
                    encoder_hidden_states_image=twice(image_embeds),
                    return_dict=False,
                )[0]

        if not first["cfg"]:
            velocity = forward(gather("embeds"), 1, None)
        else:
            if one:  # already [prompt; negative prompt]
                cond_text, uncond_text = first["embeds"][0:1], first["embeds"][1:2]
                both = first["embeds"]
            else:
                cond_text = torch.cat([s.data["embeds"][0:1] for s in states])
                uncond_text = torch.cat([s.data["embeds"][1:2] for s in states])
                both = torch.cat([cond_text, uncond_text])
            if self._batch_cfg(model_input):  # both CFG branches in one forward
                output = forward(both, 2, "cfg")
            else:  # two forwards, as diffusers runs them: less activation memory
                output = torch.cat(
                    [forward(cond_text, 1, "cond"), forward(uncond_text, 1, "uncond")]
                )
            cond_out, uncond_out = output[:batch], output[batch:]
            scales = [s.data["guidance"][s.step_index] for s in states]
            if all(g == scales[0] for g in scales):
                scale: Any = scales[0]
            else:
                rows = [s.data["guidance_t"][s.step_index] for s in states]
                scale = torch.stack(rows).to(output.dtype).view(-1, 1, 1, 1, 1)
            velocity = uncond_out + scale * (cond_out - uncond_out)
        velocity = velocity.float()

        if one:
            samples = first["samples"]
            outputs = [velocity, *first["outputs"]]
        else:
            # In lockstep every state holds the same number of past tensors; otherwise pad.
            n_samples = len(first["samples"]) if lockstep else table.sample_history
            n_outputs = len(first["outputs"]) if lockstep else table.output_history - 1
            samples = [latents] + [stack_slot(states, "samples", k) for k in range(1, n_samples)]
            outputs = [velocity] + [stack_slot(states, "outputs", j) for j in range(n_outputs)]
        if lockstep:
            new = table.apply(n, samples, outputs)
        else:
            weights = torch.stack([s.data["weights_t"][s.step_index] for s in states])
            new = apply_weights(weights, samples, outputs, table.sample_history)
        news = [new] if one else list(new.split(1))
        velocities = [velocity] if one else list(velocity.split(1))
        for state, sample, vel in zip(states, news, velocities, strict=True):
            d = state.data
            d["samples"] = [sample, *d["samples"]][: table.sample_history]
            d["outputs"] = [vel, *d["outputs"]][: max(table.output_history - 1, 0)]
            state.step_index += 1

    @torch.no_grad()
    def decode(self, state: DenoiseState) -> GenerationResult:
        d = state.data
        latents = d["samples"][0]
        if d["frame_mask"] is not None:
            mask = d["frame_mask"]
            latents = (1 - mask) * d["condition"] + mask * latents
        array = self.encoders.decode(latents)
        images = None
        if array.shape[0] == 1:  # a one-frame "video" is an image: offer it as one too
            from PIL import Image

            images = [Image.fromarray(array[0])]
        return GenerationResult(
            images=images,
            video=array,
            fps=d["fps"],
            info=self._info(state),
        )

    def _info(self, state: DenoiseState) -> dict[str, Any]:
        info: dict[str, Any] = {
            "seed": state.data["seed"],
            "variant": self.layout.variant,
            "attention": self.routing[0] if self.routing else {},
            "cfg_batch": self.cfg_batch,
        }
        if self.accel is not None:
            info["acceleration"] = self.accel.as_dict()
            if self.accel.caches:
                info["step_cache"] = self.accel.finish_request(state.request.request_id)
        return info

    # -- helpers ---------------------------------------------------------------------------

    def _batch_cfg(self, model_input: torch.Tensor) -> bool:
        if self.cfg_batch != "auto":
            return bool(self.cfg_batch)
        _, _, frames, height, width = model_input.shape
        tokens = frames * (height // self.layout.patch[1]) * (width // self.layout.patch[2])
        return 2 * model_input.shape[0] * tokens <= CFG_BATCH_MAX_TOKENS

    def _cache_context(self, component: str, ids: list[str], branch: str | None) -> Any:
        """The step cache's context for one forward (a no-op without a cache)."""
        if self.accel is None or not self.accel.caches:
            return contextlib.nullcontext()
        return self.accel.cache_context(component, cache_key(ids, branch))

    def _table(self, steps: int, flow_shift: float | None) -> ScheduleTable:
        key = (steps, flow_shift)
        table = self._tables.get(key)
        if table is None:
            scheduler = self.scheduler
            if flow_shift is not None:
                config = scheduler.config
                name = "flow_shift" if "flow_shift" in config else "shift"
                scheduler = type(scheduler).from_config(config, **{name: flow_shift})
            table = ScheduleTable.from_scheduler(scheduler, steps)
            self._tables[key] = table
        return table


def _cfg_batch(value: Any) -> bool | str:
    if isinstance(value, str):
        low = value.strip().lower()
        if low == "auto":
            return "auto"
        if low in {"1", "true", "yes", "on", "always"}:
            return True
        if low in {"0", "false", "no", "off", "never"}:
            return False
        raise ConfigError(f"cfg_batch: {value!r} is not auto, true or false")
    return bool(value)


def _route(model: Any, options: PipelineOptions) -> dict[str, Any]:
    report = route_attention(model, options.attention)
    names = dict(options.attention.names) if options.attention is not None else {}
    return {"routed": report.routed, "skipped": report.skipped, "backends": names}
