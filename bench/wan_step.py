"""One Wan2.2-TI2V-5B denoising step: omni-wan's ``step()`` vs diffusers' ``WanPipeline``.

    python3 bench/wan_step.py --out $OUT/wan_step_h200.json          # CUDA, real-size config
    python3 bench/wan_step.py --tiny --out /tmp/wan_step_tiny.json   # CPU smoke run

Both sides share one ``WanTransformer3DModel`` built from the real TI2V-5B config with random
weights (bf16), at 704x1280, 121 frames (27,280 tokens), guidance 5 (so a step is a conditional
and an unconditional forward plus the scheduler update). Prompt embeddings are random tensors of
the real shape ``[1, 512, 4096]``: the text encoder plays no part in a step.

- ``diffusers``: ``WanPipeline(...)(prompt_embeds=..., output_type="latent")`` with the TI2V
  layout (``expand_timesteps=True``); per-step times are CUDA events recorded by its
  ``callback_on_step_end``. Its attention is diffusers' default (native SDPA).
- ``omni``: the same weights driven by omni-wan's ``prepare_embedded`` + ``step`` as
  ``Omni(...)`` loads Wan (eager): fused Q/K/V projections, ``cfg_batch="auto"``,
  attention through omni's dispatcher with the platform's best backend (``--attention auto``:
  cuDNN SDPA on H100/H200), one timestep per sample instead of diffusers' per-token copy for
  text-only TI2V, the scheduler as a precomputed table.
- ``omni-batched-cfg``: the same with ``cfg_batch=True`` (both CFG branches in one forward;
  ``auto``, the default, runs two forwards at this size).
- ``omni-sdpa-unfused``: omni on diffusers' unfused model with PyTorch's default SDPA kernel
  choice (what diffusers uses): what the orchestration alone changes.
- ``diffusers-again``: diffusers re-run at the end, to show the clocks did not drift.

The first ``--warmup`` steps of every run are discarded; the median of the next ``--reps``
is reported, with the peak memory of each run. Results (and the exact command) go to ``--out``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform as host_platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: transformer/config.json of Wan-AI/Wan2.2-TI2V-5B-Diffusers.
TI2V_5B = {
    "added_kv_proj_dim": None,
    "attention_head_dim": 128,
    "cross_attn_norm": True,
    "eps": 1e-06,
    "ffn_dim": 14336,
    "freq_dim": 256,
    "image_dim": None,
    "in_channels": 48,
    "num_attention_heads": 24,
    "num_layers": 30,
    "out_channels": 48,
    "patch_size": [1, 2, 2],
    "pos_embed_seq_len": None,
    "qk_norm": "rms_norm_across_heads",
    "rope_max_seq_len": 1024,
    "text_dim": 4096,
}
TINY = {
    **TI2V_5B,
    "attention_head_dim": 16,
    "num_attention_heads": 2,
    "num_layers": 2,
    "ffn_dim": 64,
    "text_dim": 32,
    "freq_dim": 32,
}


def _paths() -> None:
    """Use the working tree when omni is not installed (the GPU machine)."""
    for sub in ("core/src", "plugins/omni-wan/src"):
        path = str(ROOT / sub)
        if path not in sys.path:
            sys.path.insert(0, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write.")
    parser.add_argument("--tiny", action="store_true", help="Tiny config on the CPU (smoke run).")
    parser.add_argument("--height", type=int, default=None)
    parser.add_argument("--width", type=int, default=None)
    parser.add_argument("--frames", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--attention", default="auto", help="omni attention backend.")
    parser.add_argument("--dtype", default=None, help="bfloat16 (CUDA default) or float32.")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="Regional compile of the shared model (diffusers' compile_repeated_blocks) for "
        "every run: compares against the bar an expert diffusers user has. Use --warmup 3+.",
    )
    args = parser.parse_args(argv)
    _paths()

    import os

    os.environ.setdefault("OMNI_DISABLE_PLUGIN_AUTOLOAD", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import diffusers
    import torch

    cuda = torch.cuda.is_available() and not args.tiny
    if not cuda and not args.tiny:
        parser.error("no CUDA device: pass --tiny for a CPU smoke run")
    device = torch.device("cuda" if cuda else "cpu")
    dtype = getattr(torch, args.dtype or ("bfloat16" if cuda else "float32"))
    config = TINY if args.tiny else TI2V_5B
    height = args.height or (64 if args.tiny else 704)
    width = args.width or (64 if args.tiny else 1280)
    frames = args.frames or (5 if args.tiny else 121)
    steps = args.warmup + args.reps

    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanTransformer3DModel

    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device(device):
        model = WanTransformer3DModel(**config)
    model = _cast_like_from_pretrained(model, dtype).eval().requires_grad_(False)
    build_s = time.perf_counter() - t0
    if args.compile:
        # In place on the shared blocks: both sides run the same compiled blocks (dynamo
        # specialises per batch size and per attention routing; warmup steps absorb that).
        model.compile_repeated_blocks(fullgraph=False)
    scheduler = UniPCMultistepScheduler(
        prediction_type="flow_prediction",
        use_flow_sigmas=True,
        num_train_timesteps=1000,
        flow_shift=5.0,
    )
    # Never run: it only gives diffusers' pipeline the TI2V VAE factors (16 spatial, 4 temporal).
    vae = AutoencoderKLWan(
        base_dim=8,
        decoder_base_dim=8,
        z_dim=48,
        dim_mult=[1, 1, 1, 1],
        num_res_blocks=1,
        is_residual=True,
        in_channels=12,
        out_channels=12,
        patch_size=2,
        scale_factor_spatial=16,
        scale_factor_temporal=4,
        latents_mean=[0.0] * 48,
        latents_std=[1.0] * 48,
    ).to(device)
    gen = torch.Generator("cpu").manual_seed(1)
    embeds = torch.randn(2, 512, config["text_dim"], generator=gen).to(device, dtype)
    timer = _Timer(device)
    results: dict[str, Any] = {}

    # diffusers' own loop, steps timed by its step-end callback.
    def run_diffusers() -> tuple[dict[str, Any], Any]:
        pipe = diffusers.WanPipeline(
            tokenizer=None,
            text_encoder=None,
            vae=vae,
            scheduler=UniPCMultistepScheduler.from_config(scheduler.config),
            transformer=model,
            expand_timesteps=True,
        )
        pipe.set_progress_bar_config(disable=True)
        marks: list[Any] = []

        def on_step(_pipe: Any, i: int, t: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
            marks.append(timer.mark())
            return {}

        timer.reset_peak()
        start = timer.mark()
        latents = pipe(
            prompt_embeds=embeds[0:1],
            negative_prompt_embeds=embeds[1:2],
            height=height,
            width=width,
            num_frames=frames,
            num_inference_steps=steps,
            guidance_scale=5.0,
            generator=torch.Generator("cpu").manual_seed(0),
            output_type="latent",
            callback_on_step_end=on_step,
        ).frames
        return timer.summary(start, marks, args.warmup), latents

    # omni-wan's staged pipeline on the same model.
    # omni's own copy, prepared as Omni(...) loads Wan by default (eager): fused Q/K/V
    # projections. The shared `model` stays as diffusers loads it.
    import copy

    from omni_core.diffusion.acceleration.compile import fuse_qkv

    omni_model = copy.deepcopy(model)
    fuse_qkv(omni_model)

    def run_omni(
        backend: str, *, fused: bool = True, cfg_batch: bool | str = "auto"
    ) -> tuple[dict[str, Any], Any]:
        from omni_core import GenerationRequest, PipelineOptions
        from omni_core.contract.attention import AttentionRouter
        from omni_core.contract.config import AttentionConfig
        from omni_core.contract.host import get_registry
        from omni_core.contract.platforms import current_platform
        from omni_wan.layout import WanLayout
        from omni_wan.pipeline import WanVideoPipeline

        platform = current_platform()
        router = AttentionRouter.build(AttentionConfig(backend=backend), get_registry(), platform)
        options = PipelineOptions(
            device=device,
            dtype=dtype,
            platform=platform,
            attention=router,
            extra={"cfg_batch": cfg_batch},
        )
        layout = WanLayout(
            class_name="WanPipeline",
            boundary_ratio=None,
            expand_timesteps=True,
            two_experts=False,
            vae_spatial=16,
            vae_temporal=4,
            patch=(1, 2, 2),
            in_channels=config["in_channels"],
            z_dim=48,
            image_dim=None,
        )
        transformer = omni_model if fused else model
        pipe = WanVideoPipeline(
            layout, {"transformer": transformer, "scheduler": scheduler}, options
        )
        request = GenerationRequest(
            height=height,
            width=width,
            num_frames=frames,
            num_inference_steps=steps,
            guidance_scale=5.0,
            seed=0,
        )
        timer.reset_peak()
        start = timer.mark()
        state = pipe.prepare_embedded(request, embeds)  # validates the raw request once
        marks = []
        for _ in range(steps):
            pipe.step([state])
            marks.append(timer.mark())
        summary = timer.summary(start, marks, args.warmup)
        summary["attention_backends"] = dict(router.names)
        summary["fused_qkv"] = fused
        summary["cfg_batch"] = cfg_batch
        return summary, state.data["samples"][0]

    from omni_core.diffusion.attention_routing import unroute_attention

    results["diffusers"], ref = run_diffusers()
    runs = (
        ("omni", args.attention, True, "auto"),
        ("omni-batched-cfg", args.attention, True, True),
        ("omni-sdpa-unfused", "sdpa", False, "auto"),
    )
    for name, backend, fused, cfg_batch in runs:
        try:
            results[name], ours = run_omni(backend, fused=fused, cfg_batch=cfg_batch)
            results[name]["latents_rel_diff_vs_diffusers"] = _rel(ours, ref)
        except Exception as exc:  # noqa: BLE001 - keep the other measurements
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "median_s": float("inf")}
            results[name]["peak_memory_bytes"] = None
    unroute_attention(model)
    results["diffusers-again"], _ = run_diffusers()

    base = min(results["diffusers"]["median_s"], results["diffusers-again"]["median_s"])
    report = {
        "benchmark": "wan2.2-ti2v-5b one denoising step (CFG), omni step() vs diffusers",
        "command": f"python3 bench/wan_step.py {shlex.join(argv or sys.argv[1:])}",
        "device": torch.cuda.get_device_name(0) if cuda else host_platform.processor() or "cpu",
        "torch": torch.__version__,
        "diffusers": diffusers.__version__,
        "python": host_platform.python_version(),
        "dtype": str(dtype).removeprefix("torch."),
        "config": "tiny" if args.tiny else "Wan2.2-TI2V-5B transformer (random weights)",
        "compiled": bool(args.compile),
        "height": height,
        "width": width,
        "frames": frames,
        "tokens": ((frames - 1) // 4 + 1) * (height // 32) * (width // 32),
        "warmup_steps": args.warmup,
        "measured_steps": args.reps,
        "model_build_s": round(build_s, 3),
        "results": results,
        "speedup_omni_vs_diffusers": round(base / results["omni"]["median_s"], 4),
        "best_omni": min(
            (r for r in results if r.startswith("omni")), key=lambda r: results[r]["median_s"]
        ),
        "omni_not_slower": results["omni"]["median_s"] <= base * 1.01,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("device", "speedup_omni_vs_diffusers")}))
    for name, row in results.items():
        peak = row["peak_memory_bytes"]
        print(
            f"{name:16s} median {row['median_s'] * 1000:9.1f} ms/step   "
            f"peak {'-' if peak is None else f'{peak / 2**30:.2f} GiB'}  {row.get('error', '')}"
        )
    return 0


def _cast_like_from_pretrained(model: Any, dtype: Any) -> Any:
    """Cast to ``dtype`` but keep the modules diffusers keeps in float32 when it loads the
    checkpoint with ``torch_dtype`` (``_keep_in_fp32_modules``: norms, time embedder, rope)."""
    import torch

    keep = set(getattr(model, "_keep_in_fp32_modules", None) or ())
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.is_floating_point():
            target = torch.float32 if keep & set(name.split(".")) else dtype
            tensor.data = tensor.data.to(target)
    return model


def _rel(ours: Any, ref: Any) -> float:
    ours, ref = ours.float(), ref.float()
    return float((ours - ref).norm() / ref.norm().clamp_min(1e-12))


class _Timer:
    """CUDA events on a GPU (no sync until the summary), perf_counter on the CPU."""

    def __init__(self, device: Any) -> None:
        import torch

        self.cuda = device.type == "cuda"
        self.torch = torch

    def mark(self) -> Any:
        if self.cuda:
            event = self.torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def reset_peak(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()
            self.torch.cuda.reset_peak_memory_stats()

    def summary(self, start: Any, marks: list[Any], warmup: int) -> dict[str, Any]:
        if self.cuda:
            self.torch.cuda.synchronize()
            points = [start, *marks]
            times = [a.elapsed_time(b) / 1000 for a, b in itertools.pairwise(points)]
            peak = int(self.torch.cuda.max_memory_allocated())
        else:
            points = [start, *marks]
            times = [b - a for a, b in itertools.pairwise(points)]
            peak = None
        measured = times[warmup:]
        return {
            "step_s": [round(t, 5) for t in times],
            "median_s": statistics.median(measured),
            "min_s": min(measured),
            "peak_memory_bytes": peak,
        }


if __name__ == "__main__":
    sys.exit(main())
