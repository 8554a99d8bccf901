"""Wan 2.1 / 2.2 on omni's staged runtime: prepare / step / decode around diffusers' models.

The models are diffusers' and transformers' own classes (``WanTransformer3DModel``,
``AutoencoderKLWan``, ``UMT5EncoderModel``, ``CLIPVisionModel``) loaded from the checkpoint; the
scheduler is the one its ``scheduler_config.json`` names, turned into a precomputed
:class:`~omni_core.pipelines.schedule.ScheduleTable` so that :meth:`WanVideoPipeline.step` has
no host synchronisation. What this module adds is the orchestration diffusers' ``WanPipeline`` /
``WanImageToVideoPipeline`` do inside one ``__call__``, cut into stages, with two speed-ups that
change no numbers beyond float rounding: classifier-free guidance runs the conditional and
unconditional passes as one batched forward, and compatible requests share that forward.

One class serves every variant; ``model_index.json`` says which:

- ``WanPipeline`` (Wan2.1 T2V 1.3B / 14B; Wan2.2 T2V-A14B with ``transformer_2`` and
  ``boundary_ratio``; Wan2.2 TI2V-5B with ``expand_timesteps``, text or text+image);
- ``WanImageToVideoPipeline`` (Wan2.1 I2V with a CLIP image encoder; Wan2.2 I2V-A14B).
"""

from __future__ import annotations

import json
import random
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from omni_core.errors import ConfigError, InvalidRequestError, ModelNotFoundError
from omni_core.pipelines.base import (
    DenoiseState,
    GenerationRequest,
    GenerationResult,
    PipelineOptions,
    StagedPipeline,
)
from omni_core.pipelines.schedule import ScheduleTable
from omni_wan.extras import WanExtras

#: diffusers' defaults for Wan (WanPipeline.__call__).
DEFAULT_HEIGHT = 480
DEFAULT_WIDTH = 832
DEFAULT_FRAMES = 81
DEFAULT_STEPS = 50
DEFAULT_GUIDANCE = 5.0
#: cfg_batch="auto": batch CFG's branches while one forward holds at most this many tokens.
CFG_BATCH_MAX_TOKENS = 16384
#: Text tokens Wan's I2V cross-attention assumes (diffusers hard-codes it).
I2V_TEXT_TOKENS = 512


@dataclass(frozen=True)
class WanLayout:
    """What the checkpoint's JSON files say, read without loading any weights."""

    class_name: str
    boundary_ratio: float | None
    expand_timesteps: bool
    two_experts: bool
    vae_spatial: int
    vae_temporal: int
    patch: tuple[int, int, int]
    in_channels: int
    z_dim: int
    image_dim: int | None

    @property
    def image_to_video(self) -> bool:
        return self.class_name == "WanImageToVideoPipeline"

    @property
    def default_fps(self) -> int:
        """Frames per second of the reference: 24 for Wan2.2 TI2V-5B, 16 for the others."""
        return 24 if self.expand_timesteps else 16

    @property
    def size_multiple(self) -> tuple[int, int]:
        return (self.vae_spatial * self.patch[1], self.vae_spatial * self.patch[2])

    @property
    def variant(self) -> str:
        if self.image_to_video:
            return "i2v-a14b" if self.two_experts else "i2v"
        if self.expand_timesteps:
            return "ti2v"
        return "t2v-a14b" if self.two_experts else "t2v"

    @classmethod
    def read(cls, path: Path) -> WanLayout:
        try:
            index = json.loads((path / "model_index.json").read_text())
            transformer_dir = "transformer" if _present(index, "transformer") else "transformer_2"
            transformer = json.loads((path / transformer_dir / "config.json").read_text())
            vae = json.loads((path / "vae" / "config.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelNotFoundError(f"{path}: not a Wan diffusers checkpoint: {exc}") from None
        return cls(
            class_name=index.get("_class_name", "WanPipeline"),
            boundary_ratio=index.get("boundary_ratio"),
            expand_timesteps=bool(index.get("expand_timesteps", False)),
            two_experts=_present(index, "transformer") and _present(index, "transformer_2"),
            vae_spatial=int(vae.get("scale_factor_spatial") or 8),
            vae_temporal=int(vae.get("scale_factor_temporal") or 4),
            patch=tuple(transformer.get("patch_size", (1, 2, 2))),  # type: ignore[arg-type]
            in_channels=int(transformer.get("in_channels", 16)),
            z_dim=int(vae.get("z_dim", 16)),
            image_dim=transformer.get("image_dim"),
        )

    def check(self, request: GenerationRequest) -> GenerationRequest:
        """Complete defaults and reject what Wan cannot do, before any compute."""
        extras = parse_extras(request.extras)
        height = request.height or DEFAULT_HEIGHT
        width = request.width or DEFAULT_WIDTH
        frames = request.num_frames or DEFAULT_FRAMES
        mh, mw = self.size_multiple
        for name, value, multiple in (("height", height, mh), ("width", width, mw)):
            if value % multiple:
                raise InvalidRequestError(
                    f"{name} {value} is not divisible by {multiple} (VAE factor "
                    f"{self.vae_spatial} x patch {multiple // self.vae_spatial}); try "
                    f"{max(multiple, round(value / multiple) * multiple)}",
                    param=name,
                )
        if (frames - 1) % self.vae_temporal:
            k = max(0, round((frames - 1) / self.vae_temporal))
            raise InvalidRequestError(
                f"num_frames {frames} must be {self.vae_temporal}k+1 (e.g. 5, 17, 49, 81, 121); "
                f"try {k * self.vae_temporal + 1}",
                param="num_frames",
            )
        if request.num_outputs != 1:
            raise InvalidRequestError(
                "Wan generates one video per request; send several requests instead",
                param="n",
            )
        images = list(request.images)
        if self.image_to_video and len(images) != 1:
            raise InvalidRequestError(
                f"this is an image-to-video checkpoint ({self.variant}): give exactly one "
                f"conditioning image (got {len(images)})",
                param="image",
            )
        if not self.image_to_video and not self.expand_timesteps and images:
            raise InvalidRequestError(
                f"this text-to-video checkpoint ({self.variant}) takes no image; use a Wan I2V "
                "or TI2V checkpoint for image conditioning",
                param="image",
            )
        if len(images) > 1:
            raise InvalidRequestError("Wan takes at most one conditioning image", param="image")
        for image in images:
            if not hasattr(image, "convert") or not hasattr(image, "size"):
                raise InvalidRequestError("image must be a PIL image", param="image")
        boundary = extras.boundary_ratio if extras.boundary_ratio is not None else None
        if boundary is not None and not self.two_experts:
            raise InvalidRequestError(
                "boundary_ratio needs a two-expert (Wan2.2 A14B) checkpoint",
                param="boundary_ratio",
            )
        if extras.guidance_scale_2 is not None and not (
            self.two_experts and (boundary or self.boundary_ratio) is not None
        ):
            raise InvalidRequestError(
                "guidance_scale_2 is only used by two-expert (Wan2.2 A14B) checkpoints",
                param="guidance_scale_2",
            )
        if self.image_dim is not None and extras.max_sequence_length != I2V_TEXT_TOKENS:
            raise InvalidRequestError(
                f"Wan2.1 I2V needs max_sequence_length={I2V_TEXT_TOKENS}",
                param="max_sequence_length",
            )
        return request.model_copy(
            update={
                "height": height,
                "width": width,
                "num_frames": frames,
                "num_inference_steps": request.num_inference_steps or DEFAULT_STEPS,
                "guidance_scale": (
                    request.guidance_scale
                    if request.guidance_scale is not None
                    else DEFAULT_GUIDANCE
                ),
                "images": images,
                "extras": extras.model_dump(),
            }
        )


def parse_extras(extras: dict[str, Any]) -> WanExtras:
    """Validate Wan's extras; an unknown or bad one is an InvalidRequestError naming it."""
    from pydantic import ValidationError

    try:
        return WanExtras.model_validate(extras)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = ".".join(str(p) for p in first["loc"]) or "extras"
        if first["type"] == "extra_forbidden":
            known = ", ".join(WanExtras.model_fields)
            message = f"unknown extra {name!r} for Wan; known extras: {known}"
        else:
            message = f"extras.{name}: {first['msg']}"
        raise InvalidRequestError(message, param=name) from None


def _present(index: dict[str, Any], name: str) -> bool:
    entry = index.get(name)
    return isinstance(entry, list) and len(entry) == 2 and entry[0] is not None


class WanVideoPipeline(StagedPipeline):
    """Every Wan 2.1 / 2.2 variant, text- and image-to-video, one denoising step at a time."""

    extras_model = WanExtras

    def __init__(self, layout: WanLayout, components: dict[str, Any], options: PipelineOptions):
        self.layout = layout
        self.options = options
        self.device = options.device
        self.dtype = options.dtype
        # Text encoder, tokenizer and VAE may be absent when prompt embeddings are given
        # (prepare_embedded) and decoding is not needed, e.g. in step benchmarks.
        self.tokenizer = components.get("tokenizer")
        self.text_encoder = components.get("text_encoder")
        self.vae = components.get("vae")
        self.scheduler = components["scheduler"]
        self.image_encoder = components.get("image_encoder")
        self.image_processor = components.get("image_processor")
        self.transformers = [
            m for m in (components.get("transformer"), components.get("transformer_2")) if m
        ]
        self.routing = [_route(m, options) for m in self.transformers]
        from diffusers.video_processor import VideoProcessor

        self.video_processor = VideoProcessor(vae_scale_factor=layout.vae_spatial)
        if self.vae is not None:
            vae_cfg = self.vae.config
            shape = (1, vae_cfg.z_dim, 1, 1, 1)
            self._latents_mean = torch.tensor(vae_cfg.latents_mean).view(shape)
            self._latents_std_inv = 1.0 / torch.tensor(vae_cfg.latents_std).view(shape)
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
        #: What omni_core.acceleration applied (set by from_pretrained; None: nothing).
        self.accel: Any = None

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> WanVideoPipeline:
        import diffusers
        from diffusers import AutoencoderKLWan, WanTransformer3DModel
        from transformers import AutoTokenizer, UMT5EncoderModel

        from omni_core.pipelines.diffusers_utils import dtype_kwargs

        layout = WanLayout.read(path)
        index = json.loads((path / "model_index.json").read_text())
        device, dtype = options.device, options.dtype
        vae_dtype = _dtype(options.extra.get("vae_dtype"), torch.float32)
        components: dict[str, Any] = {}
        for name in ("transformer", "transformer_2"):
            if _present(index, name):
                components[name] = (
                    WanTransformer3DModel.from_pretrained(
                        path / name, **dtype_kwargs(dtype), use_safetensors=True
                    )
                    .to(device)
                    .eval()
                )
        components["vae"] = (
            AutoencoderKLWan.from_pretrained(
                path / "vae", **dtype_kwargs(vae_dtype), use_safetensors=True
            )
            .to(device)
            .eval()
        )
        components["text_encoder"] = (
            UMT5EncoderModel.from_pretrained(
                path / "text_encoder", dtype=dtype, use_safetensors=True
            )
            .to(device)
            .eval()
        )
        components["tokenizer"] = AutoTokenizer.from_pretrained(path / "tokenizer")
        scheduler_name = json.loads((path / "scheduler" / "scheduler_config.json").read_text())[
            "_class_name"
        ]
        scheduler_cls = getattr(diffusers, scheduler_name, None)
        if scheduler_cls is None or not issubclass(scheduler_cls, diffusers.SchedulerMixin):
            raise ModelNotFoundError(f"{path}: unknown scheduler class {scheduler_name!r}")
        components["scheduler"] = scheduler_cls.from_pretrained(path / "scheduler")
        if _present(index, "image_encoder"):
            from transformers import CLIPImageProcessor, CLIPVisionModel

            components["image_encoder"] = (
                CLIPVisionModel.from_pretrained(
                    path / "image_encoder", dtype=dtype, use_safetensors=True
                )
                .to(device)
                .eval()
            )
            components["image_processor"] = CLIPImageProcessor.from_pretrained(
                path / "image_processor"
            )
        pipeline = cls(layout, components, options)  # routes attention first
        from omni_core.acceleration import apply_acceleration

        # Fused QKV (safe for Wan2.1 I2V too: fusion keeps add_k_proj, which diffusers' processor
        # reads to split the CLIP image tokens), quantization, regional compile, step cache.
        pipeline.accel = apply_acceleration(
            {n: components.get(n) for n in ("transformer", "transformer_2")},
            options,
            pipeline_cls=cls,
        )
        return pipeline

    @classmethod
    def precheck(cls, path: Path, request: GenerationRequest) -> GenerationRequest:
        return WanLayout.read(path).check(request)

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        return self.layout.check(request)

    def output_fps(self, request: GenerationRequest) -> int:
        return parse_extras(request.extras).fps or self.layout.default_fps

    # -- stages ----------------------------------------------------------------------------

    @torch.no_grad()
    def prepare(self, request: GenerationRequest) -> DenoiseState:
        request = self.layout.check(request)
        extras = WanExtras.model_validate(request.extras)  # already checked above
        cfg = float(request.guidance_scale or 0.0) > 1.0
        texts = [request.prompt] + ([request.negative_prompt or ""] if cfg else [])
        embeds = self._encode_text(texts, extras.max_sequence_length)
        return self.prepare_embedded(request, embeds)

    @torch.no_grad()
    def prepare_embedded(self, request: GenerationRequest, embeds: torch.Tensor) -> DenoiseState:
        """:meth:`prepare` with the text already encoded: ``embeds`` is ``[1 or 2, L, D]``
        (prompt, then negative prompt when guidance > 1), as the T5 encoder would give it."""
        request = self.layout.check(request)
        extras = WanExtras.model_validate(request.extras)
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
        if image is not None and self.image_encoder is not None:
            image_embeds = self._encode_image(image)

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
            condition = self._encode_condition(image, height, width, frames)
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
            weights_t=_weights_tensor(table).to(self.device),
        )
        return DenoiseState(request=request, num_steps=table.num_steps, data=data)

    def batch_key(self, state: DenoiseState) -> Hashable:
        d = state.data
        latents = d["samples"][0]
        # The step index is not part of the key: states at different steps share a forward
        # (per-sample timesteps and scheduler weights), which is what continuous batching needs.
        return (
            tuple(latents.shape),
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
            samples = [latents] + [
                _stack_slot(states, "samples", k) for k in range(1, n_samples)
            ]
            outputs = [velocity] + [_stack_slot(states, "outputs", j) for j in range(n_outputs)]
        if lockstep:
            new = table.apply(n, samples, outputs)
        else:
            weights = torch.stack([s.data["weights_t"][s.step_index] for s in states])
            new = _apply_weights(weights, samples, outputs, table.sample_history)
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
        vae_device = next(self.vae.parameters()).device
        latents = latents.to(vae_device, self.vae.dtype)
        mean = self._latents_mean.to(latents.device, latents.dtype)
        std_inv = self._latents_std_inv.to(latents.device, latents.dtype)
        video = self.vae.decode(latents / std_inv + mean, return_dict=False)[0]
        # diffusers' VideoProcessor "np" output is (x / 2 + 0.5).clamp(0, 1); to uint8 on device.
        frames = ((video[0] / 2 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8)
        array = frames.permute(1, 2, 3, 0).contiguous().cpu().numpy()
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
            import contextlib

            return contextlib.nullcontext()
        from omni_core.acceleration import cache_key

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

    def _encode_text(self, prompts: list[str], max_length: int) -> torch.Tensor:
        from diffusers.pipelines.wan.pipeline_wan import prompt_clean

        inputs = self.tokenizer(
            [prompt_clean(p) for p in prompts],
            padding="max_length",
            max_length=max_length,
            truncation=True,
            add_special_tokens=True,
            return_attention_mask=True,
            return_tensors="pt",
        )
        # Token counts come from the host-side mask: no device round trip.
        lengths = inputs.attention_mask.gt(0).sum(dim=1).tolist()
        encoder_device = next(self.text_encoder.parameters()).device
        hidden = self.text_encoder(
            inputs.input_ids.to(encoder_device), inputs.attention_mask.to(encoder_device)
        ).last_hidden_state
        hidden = hidden.to(device=self.device, dtype=self.dtype)
        # Wan zeroes the padding positions (diffusers trims to the length, then pads with 0).
        out = torch.zeros_like(hidden)
        for i, length in enumerate(lengths):
            out[i, :length] = hidden[i, :length]
        return out.to(self.transformers[0].dtype)

    def _encode_image(self, image: Any) -> torch.Tensor:
        assert self.image_encoder is not None and self.image_processor is not None
        encoder_device = next(self.image_encoder.parameters()).device
        pixels = self.image_processor(images=image, return_tensors="pt").to(encoder_device)
        hidden = self.image_encoder(**pixels, output_hidden_states=True).hidden_states[-2]
        return hidden.to(self.device, self.transformers[0].dtype)

    def _encode_condition(self, image: Any, height: int, width: int, frames: int) -> torch.Tensor:
        """VAE latents of the conditioning image (first frame; zeros after it for I2V)."""
        pixels = self.video_processor.preprocess(image, height=height, width=width)
        pixels = pixels.to(self.device, torch.float32).unsqueeze(2)
        if not self.layout.expand_timesteps:
            pixels = torch.cat([pixels, pixels.new_zeros(1, 3, frames - 1, height, width)], dim=2)
        vae_device = next(self.vae.parameters()).device
        posterior = self.vae.encode(pixels.to(vae_device, self.vae.dtype)).latent_dist
        condition = posterior.mode().to(self.device, torch.float32)
        mean = self._latents_mean.to(condition.device)
        std_inv = self._latents_std_inv.to(condition.device)
        return (condition - mean) * std_inv


def _weights_tensor(table: ScheduleTable) -> torch.Tensor:
    """The table's per-step weights as ``[steps, K + W]`` (zeros where a step uses fewer)."""
    k, w = table.sample_history, table.output_history
    rows = torch.zeros(table.num_steps, k + w, dtype=torch.float32)
    for n, (a, b) in enumerate(zip(table.sample_weights, table.output_weights, strict=True)):
        rows[n, : len(a)] = torch.tensor(a, dtype=torch.float32)
        rows[n, k : k + len(b)] = torch.tensor(b, dtype=torch.float32)
    return rows


def _stack_slot(states: list[DenoiseState], key: str, index: int) -> torch.Tensor:
    """Slot ``index`` of every state's ``key`` history, batched; zeros where a state has none
    yet (a state that early gives that slot zero weight)."""
    parts = []
    for state in states:
        history = state.data[key]
        parts.append(
            history[index]
            if index < len(history)
            else torch.zeros_like(state.data["samples"][0])
        )
    return torch.cat(parts)


def _apply_weights(
    weights: torch.Tensor, samples: list[torch.Tensor], outputs: list[torch.Tensor], k: int
) -> torch.Tensor:
    """x[n+1] per sample: ``weights`` is ``[B, K + W]`` over samples then outputs."""
    shape = (-1,) + (1,) * (samples[0].ndim - 1)
    result = samples[0] * weights[:, 0].view(shape)
    for i, tensor in enumerate(samples[1:], start=1):
        result = result.addcmul_(tensor, weights[:, i].view(shape))
    for j, tensor in enumerate(outputs):
        result = result.addcmul_(tensor, weights[:, k + j].view(shape))
    return result


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
    from omni_core.pipelines.diffusers_attention import route_attention

    report = route_attention(model, options.attention)
    names = dict(options.attention.names) if options.attention is not None else {}
    return {"routed": report.routed, "skipped": report.skipped, "backends": names}


def _dtype(value: Any, default: torch.dtype) -> torch.dtype:
    if value is None:
        return default
    if isinstance(value, torch.dtype):
        return value
    result = getattr(torch, str(value).removeprefix("torch."), None)
    if not isinstance(result, torch.dtype):
        raise InvalidRequestError(f"unknown dtype {value!r}", param="vae_dtype")
    return result
