"""One Qwen-Image denoising step with true CFG: omni-qwen's staged step vs diffusers, same run.

    python3 bench/qwen_step.py --out $OUT/qwen-step-h200.json          # H200: real size, bf16
    python3 bench/qwen_step.py --tiny --out /tmp/qwen-step-tiny.json   # CPU smoke run

The transformer has Qwen-Image's real shape (60 double-stream blocks, 24 heads x 128, text dim
3584) with random weights, at 1024x1024 (4096 image tokens); prompt embeddings are random
tensors of the encoder's shape, so no text encoder is loaded. Both sides share one transformer
object:

* diffusers: ``QwenImagePipeline.__call__`` itself (prompt embeddings given, latent output),
  timed per step with CUDA events recorded by ``callback_on_step_end``;
* omni: ``QwenImagePipeline.prepare`` then ``step()`` per step (CFG branches in one batched
  forward; attention through omni's dispatcher, kernel chosen per platform), same events.

Two prompt cases: equal lengths (CFG branches in one batch-2 forward, no mask) and a short
negative prompt (``cfg_batch=auto``: two forwards as diffusers runs them; ``always``: one
batch-2 forward with the negative prompt padded and masked). Rounds
alternate diffusers / omni so clock drift favours neither. Writes JSON with the GPU name,
versions, the exact command, per-step times (mean, median, min), peak memory and the
difference between the two sides' latents after the timed steps.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform as host_platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parents[1]

REAL = {
    "patch_size": 2,
    "in_channels": 64,
    "out_channels": 16,
    "num_layers": 60,
    "attention_head_dim": 128,
    "num_attention_heads": 24,
    "joint_attention_dim": 3584,
    "axes_dims_rope": (16, 56, 56),
}
TINY = {
    "patch_size": 2,
    "in_channels": 16,
    "out_channels": 4,
    "num_layers": 2,
    "attention_head_dim": 16,
    "num_attention_heads": 2,
    "joint_attention_dim": 32,
    "axes_dims_rope": (4, 6, 6),
}
SCHEDULER = {
    "base_image_seq_len": 256,
    "base_shift": 0.5,
    "max_image_seq_len": 8192,
    "max_shift": 0.9,
    "num_train_timesteps": 1000,
    "shift": 1.0,
    "shift_terminal": 0.02,
    "time_shift_type": "exponential",
    "use_dynamic_shifting": True,
}
CFG = 4.0


def _imports() -> None:
    """Use the working tree's omni-core and omni-qwen when they are not installed."""
    for sub in ("core/src", "plugins/omni-qwen/src"):
        path = str(ROOT / sub)
        if path not in sys.path:
            sys.path.insert(0, path)
    os.environ.setdefault("OMNI_DISABLE_PLUGIN_AUTOLOAD", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _build(tiny: bool, device: Any, dtype: Any) -> tuple[Any, Any, Any]:
    import torch
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImageTransformer2DModel,
    )

    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # parameters are created in bf16 directly on the GPU
    try:
        with torch.device(device):
            transformer = QwenImageTransformer2DModel(**(TINY if tiny else REAL))
            z_dim = (TINY if tiny else REAL)["in_channels"] // 4
            vae_kwargs = {"z_dim": z_dim}
            if tiny:
                vae_kwargs.update(base_dim=4, latents_mean=[0.0] * z_dim, latents_std=[1.0] * z_dim)
            vae = AutoencoderKLQwenImage(**vae_kwargs)
    finally:
        torch.set_default_dtype(previous)
    with torch.no_grad():  # small random weights: activations stay finite through 60 blocks
        for name, p in transformer.named_parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.02)
            elif "norm" not in name:
                p.zero_()
    transformer = transformer.to(device, dtype).eval().requires_grad_(False)
    vae = vae.to(device, dtype).eval().requires_grad_(False)
    return transformer, vae, FlowMatchEulerDiscreteScheduler(**SCHEDULER)


def _events(device: Any) -> tuple[Any, Any]:
    """(record() -> marker, elapsed(a, b) -> seconds) on CUDA events, or wall clock on CPU."""
    import torch

    if device.type == "cuda":

        def record() -> Any:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event

        def elapsed(a: Any, b: Any) -> float:
            return a.elapsed_time(b) / 1000.0

        return record, elapsed
    return time.perf_counter, lambda a, b: b - a


def _stats(times: list[float]) -> dict[str, float]:
    return {
        "mean_s": statistics.fmean(times),
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "n": len(times),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write.")
    parser.add_argument("--tiny", action="store_true", help="Tiny model on CPU (smoke run).")
    parser.add_argument("--height", type=int, default=None)
    parser.add_argument("--width", type=int, default=None)
    parser.add_argument("--text-tokens", type=int, default=None, help="Prompt length.")
    parser.add_argument("--short-tokens", type=int, default=None, help="Short negative prompt.")
    parser.add_argument("--warmup", type=int, default=None, help="Untimed steps per run.")
    parser.add_argument("--reps", type=int, default=None, help="Timed steps per run.")
    parser.add_argument("--rounds", type=int, default=2, help="Alternating rounds per side.")
    args = parser.parse_args()
    _imports()

    import diffusers
    import torch
    import transformers

    from omni_core import GenerationRequest, PipelineOptions
    from omni_core.contract.attention import AttentionRouter
    from omni_core.contract.config import AttentionConfig
    from omni_core.contract.host import get_registry
    from omni_core.contract.platforms import current_platform
    from omni_core.diffusion.attention_routing import unroute_attention
    from omni_qwen import pipelines as qwen

    tiny = args.tiny
    if not tiny and not torch.cuda.is_available():
        parser.error("the real-size run needs CUDA; use --tiny on CPU")
    device = torch.device("cpu" if tiny else "cuda")
    dtype = torch.float32 if tiny else torch.bfloat16
    height = args.height or (64 if tiny else 1024)
    width = args.width or (64 if tiny else 1024)
    text_tokens = args.text_tokens or (16 if tiny else 128)
    short_tokens = args.short_tokens or (4 if tiny else 16)
    warmup = args.warmup if args.warmup is not None else (1 if tiny else 3)
    reps = args.reps or (2 if tiny else 10)
    steps = warmup + reps

    transformer, vae, scheduler = _build(tiny, device, dtype)
    dim = transformer.config.joint_attention_dim
    platform = current_platform()
    router = AttentionRouter.build(AttentionConfig(), get_registry(), platform)
    record, elapsed = _events(device)

    gen = torch.Generator("cpu").manual_seed(1)
    prompt = torch.randn(1, text_tokens, dim, generator=gen).to(device, dtype)
    negatives = {
        "equal": torch.randn(1, text_tokens, dim, generator=gen).to(device, dtype),
        "short_negative": torch.randn(1, short_tokens, dim, generator=gen).to(device, dtype),
    }

    reference = diffusers.QwenImagePipeline(
        scheduler=scheduler, vae=vae, text_encoder=None, tokenizer=None, transformer=transformer
    )
    reference.set_progress_bar_config(disable=True)

    class BenchQwen(qwen.QwenImagePipeline):
        """omni's pipeline with fixed prompt embeddings in place of the text encoder."""

        fixed: ClassVar[dict[str, Any]] = {}

        def _encode(self, prompt: str, conditions: Any, extras: Any) -> Any:
            return self.fixed[prompt]

    layout = qwen.QwenLayout(
        path=Path("bench"),
        class_name="QwenImagePipeline",
        vae_scale_factor=8,
        latent_channels=transformer.config.in_channels // 4,
        min_steps=2,
    )

    def omni_pipeline(cfg_batch: str) -> Any:
        options = PipelineOptions(
            device=device,
            dtype=dtype,
            platform=platform,
            attention=router,
            extra={"cfg_batch": cfg_batch},
        )
        components = {
            "transformer": transformer,
            "vae": vae,
            "text_encoder": None,
            "tokenizer": None,
            "scheduler": scheduler,
        }
        return BenchQwen(layout, components, options)

    def run_reference(negative: Any) -> tuple[list[float], Any, int]:
        unroute_attention(transformer)
        marks: list[Any] = []

        def on_step_end(pipe: Any, i: int, t: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
            marks.append(record())
            return {}

        _reset_peak(device)
        with torch.no_grad():
            latents = reference(
                prompt_embeds=prompt,
                prompt_embeds_mask=torch.ones(prompt.shape[:2], dtype=torch.long, device=device),
                negative_prompt_embeds=negative,
                negative_prompt_embeds_mask=torch.ones(
                    negative.shape[:2], dtype=torch.long, device=device
                ),
                true_cfg_scale=CFG,
                height=height,
                width=width,
                num_inference_steps=steps,
                generator=torch.Generator("cpu").manual_seed(0),
                output_type="latent",
                callback_on_step_end=on_step_end,
            ).images
        _sync(device)
        times = [elapsed(a, b) for a, b in itertools.pairwise(marks)]
        return times[warmup - 1 :] if warmup else times, latents, _peak(device)

    def run_omni(negative: Any, cfg_batch: str) -> tuple[list[float], Any, int]:
        pipe = omni_pipeline(cfg_batch)  # routes the shared transformer's attention to omni
        BenchQwen.fixed = {"p": prompt, "n": negative}
        request = pipe.validate(
            GenerationRequest(
                prompt="p",
                negative_prompt="n",
                guidance_scale=CFG,
                height=height,
                width=width,
                num_inference_steps=steps,
                seed=0,
            )
        )
        _reset_peak(device)
        with torch.no_grad():
            state = pipe.prepare(request)
            marks = []
            for _ in range(steps):
                pipe.step([state])
                marks.append(record())
        _sync(device)
        times = [elapsed(a, b) for a, b in itertools.pairwise(marks)]
        return times[warmup - 1 :] if warmup else times, state.latents, _peak(device)

    cases: dict[str, Any] = {}
    for case, negative in negatives.items():
        sides: dict[str, Any] = {"diffusers": ([], None, 0)}
        modes = ["auto"] if case == "equal" else ["auto", "always"]
        for mode in modes:
            sides[f"omni_cfg_batch_{mode}"] = ([], None, 0)
        for _ in range(args.rounds):
            for name in sides:
                if name == "diffusers":
                    times, latents, peak = run_reference(negative)
                else:
                    times, latents, peak = run_omni(negative, name.rsplit("_", 1)[1])
                acc, _, old_peak = sides[name]
                sides[name] = (acc + times, latents, max(old_peak, peak))
        ref_latents = sides["diffusers"][1].float()
        result: dict[str, Any] = {}
        for name, (times, latents, peak) in sides.items():
            entry = {**_stats(times), "peak_memory_bytes": peak}
            if name != "diffusers":
                diff = (latents.float() - ref_latents).abs()
                entry["latents_max_abs_diff_vs_diffusers"] = float(diff.max())
                entry["latents_rel_l2_diff_vs_diffusers"] = float(
                    diff.norm() / ref_latents.norm().clamp_min(1e-12)
                )
            result[name] = entry
        base = result["diffusers"]["median_s"]
        for entry in result.values():
            entry["speedup_vs_diffusers"] = base / entry["median_s"]
        result["negative_tokens"] = int(negative.shape[1])
        cases[case] = result
        print(case, json.dumps({k: v for k, v in result.items()}, indent=1))

    report = {
        "benchmark": "qwen-image one denoising step with true CFG (cond+uncond)",
        "command": "python3 bench/qwen_step.py " + shlex.join(sys.argv[1:]),
        "device": (
            torch.cuda.get_device_name(0)
            if device.type == "cuda"
            else host_platform.processor() or "cpu"
        ),
        "dtype": str(dtype).removeprefix("torch."),
        "tiny": tiny,
        "transformer": {
            k: list(v) if isinstance(v, tuple) else v for k, v in (TINY if tiny else REAL).items()
        },
        "height": height,
        "width": width,
        "image_tokens": (height // 16) * (width // 16),
        "text_tokens": text_tokens,
        "warmup_steps": warmup,
        "timed_steps_per_run": reps,
        "rounds": args.rounds,
        "attention_backends": dict(router.names),
        "versions": {
            "python": host_platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "diffusers": diffusers.__version__,
            "transformers": transformers.__version__,
        },
        "cases": cases,
        "unix_time": time.time(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def _peak(device: Any) -> int:
    import torch

    return int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else 0


if __name__ == "__main__":
    sys.exit(main())
