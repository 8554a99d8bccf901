"""Per-step scaling of CFG-parallel and Ulysses on real-size denoisers: 1 GPU vs 2 GPUs.

    python3 bench/parallel_bench.py --out $OUT/parallel-2xh200.json      # 2 GPUs, ~5 min
    python3 bench/parallel_bench.py --tiny --out /tmp/parallel-tiny.json  # CPU/gloo smoke, <1 min

Workloads (random bf16 weights, diffusers' own model classes, omni's attention router):

- ``wan2.2-ti2v-5b``: ``WanTransformer3DModel`` with the Wan2.2-TI2V-5B config at
  704x1280x121f (latents 48x31x44x80 -> 27,280 tokens, per-token timesteps as TI2V uses);
- ``qwen-image``: ``QwenImageTransformer2DModel`` (Qwen-Image config, 20B) at 1024x1024
  (4,096 image tokens) with 128 text tokens.

One denoising step with classifier-free guidance = the conditional and unconditional rows
(batch 2). Layouts, each in its own worker group spawned by omni's launcher (no torchrun):

- ``single``: one GPU, one batch-2 forward (what the single-GPU pipeline runs);
- ``cfg2``: cfg_parallel_size=2, each GPU runs one batch-1 branch, outputs all-gathered;
- ``ulysses2``: ulysses_degree=2, each GPU runs the batch-2 forward on half of the tokens
  (all-to-all around every self/joint attention).

All three run in one worker group of two processes (one spawn): ``single`` runs on rank 0
while rank 1 waits; ``cfg2``/``ulysses2`` hand :func:`parallelize_denoiser` the matching
parallel state over both ranks. Each layout reports the per-step time (mean of ``--iters``
after ``--warmup``, the slowest rank) and the relative L2 difference of its output against
``single`` (same seed, same weights).
The JSON (``--out``) records the exact command, GPUs, versions and all figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform as host_platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The working tree's omni-core and model plugins (the GPU machine runs from the source tree).
for _sub in ("core/src", "plugins/omni-wan/src", "plugins/omni-qwen/src"):
    if str(ROOT / _sub) not in sys.path:
        sys.path.insert(0, str(ROOT / _sub))
os.environ.setdefault("OMNI_DISABLE_PLUGIN_AUTOLOAD", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from omni_core.contract.config import ParallelConfig  # noqa: E402
from omni_core.diffusion.distributed.launcher import (  # noqa: E402
    ParallelLauncher,
    WorkerContext,
    WorkerProgram,
)

LAYOUTS = {
    "single": ParallelConfig(),
    "cfg2": ParallelConfig(cfg_parallel_size=2),
    "ulysses2": ParallelConfig(ulysses_degree=2),
}
TARGETS = {"cfg2": 1.9, "ulysses2": 1.8}  # issue 8: speed-up over one GPU, Wan workload

WAN_5B = {
    "patch_size": (1, 2, 2),
    "num_attention_heads": 24,
    "attention_head_dim": 128,
    "in_channels": 48,
    "out_channels": 48,
    "text_dim": 4096,
    "freq_dim": 256,
    "ffn_dim": 14336,
    "num_layers": 30,
    "cross_attn_norm": True,
    "qk_norm": "rms_norm_across_heads",
    "eps": 1e-6,
    "rope_max_seq_len": 1024,
}
WAN_TINY = {
    **WAN_5B,
    "num_attention_heads": 4,
    "attention_head_dim": 16,
    "text_dim": 32,
    "freq_dim": 32,
    "ffn_dim": 64,
    "num_layers": 2,
    "rope_max_seq_len": 64,
}
QWEN_IMAGE: dict[str, Any] = {}  # diffusers' defaults are Qwen-Image's config
QWEN_TINY = {
    "in_channels": 16,
    "out_channels": 4,
    "num_layers": 2,
    "attention_head_dim": 16,
    "num_attention_heads": 4,
    "joint_attention_dim": 32,
    "axes_dims_rope": (4, 6, 6),
}


#: The model plugins whose DenoiserSpecs (block lists, Ulysses sequence plans) the workloads use.
MODEL_PLUGINS = {"omni-wan": "omni_wan.plugin", "omni-qwen": "omni_qwen.plugin"}


def registry() -> Any:
    """Built-ins plus the two model plugins, loaded by module name (entry points are off here,
    and the GPU machine runs from the source tree where there are none)."""
    from omni_core.contract.host import PluginHost

    host = PluginHost(autoload=False)
    for name, module in MODEL_PLUGINS.items():
        info = host.load_module(name, module)
        if info.status != "ok":
            raise RuntimeError(f"plugin {name}: {info.error}")
    return host.registry


def workloads(tiny: bool) -> dict[str, dict[str, Any]]:
    """Model configs and input shapes; ``tiny`` keeps the code path, shrinks every size."""
    if tiny:
        return {
            # 3 x 3 x 5 = 45 tokens, 5 x 7 = 35 for Qwen: odd, to exercise uneven shards
            "wan2.2-ti2v-5b": {"config": WAN_TINY, "latents": (48, 3, 6, 10), "text": 16},
            "qwen-image": {"config": QWEN_TINY, "grid": (1, 5, 7), "text": 9},
        }
    return {
        # 704x1280x121f: VAE /16 spatial, /4 temporal -> 31 x 44 x 80 latents, 48 channels
        "wan2.2-ti2v-5b": {"config": WAN_5B, "latents": (48, 31, 44, 80), "text": 512},
        # 1024x1024: VAE /8 -> 128 x 128 latents, packed 2x2 -> 64 x 64 tokens of 64 channels
        "qwen-image": {"config": QWEN_IMAGE, "grid": (1, 64, 64), "text": 128},
    }


class BenchProgram(WorkerProgram):
    """Build a denoiser with random weights on this rank's device and time its steps."""

    def __init__(self, tiny: bool, dtype: str | None = None) -> None:
        self.tiny = tiny
        self.dtype = dtype

    def setup(self, ctx: WorkerContext) -> None:
        self.ctx = ctx

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        import torch.distributed as dist

        layout = payload["layout"]
        control = self.ctx.state.control_group
        if layout == "single":
            # Rank 0 alone; the others wait (their GPUs idle) so nothing else runs meanwhile.
            result = self._measure(payload, None) if self.ctx.rank == 0 else {}
            dist.barrier(group=control)
            return result
        return self._measure(payload, self._state(layout))

    def _state(self, layout: str) -> Any:
        import torch.distributed as dist

        from omni_core.diffusion.distributed.groups import ParallelState
        from omni_core.diffusion.distributed.layout import ParallelLayout

        base = self.ctx.state
        cfg = LAYOUTS[layout]
        return ParallelState(
            layout=ParallelLayout(cfg.cfg_parallel_size, cfg.ulysses_degree),
            rank=base.rank,
            device=base.device,
            backend=base.backend,
            cfg_group=dist.group.WORLD if cfg.cfg_parallel_size > 1 else None,
            ulysses_group=dist.group.WORLD if cfg.ulysses_degree > 1 else None,
            control_group=base.control_group,
        )

    def _measure(self, payload: dict[str, Any], state: Any) -> dict[str, Any]:
        import gc

        import torch
        import torch.distributed as dist

        from omni_core.contract.attention import AttentionRouter
        from omni_core.contract.config import AttentionConfig
        from omni_core.diffusion.attention_routing import route_attention
        from omni_core.diffusion.distributed.parallelize import parallelize_denoiser

        name = payload["workload"]
        spec = workloads(self.tiny)[name]
        device = self.ctx.device
        default = "bfloat16" if device.type == "cuda" else "float32"
        dtype = getattr(torch, self.dtype or default)
        plugins = registry()
        router = AttentionRouter.build(AttentionConfig(), plugins, self.ctx.platform)
        t0 = time.perf_counter()
        model, inputs = _build(name, spec, device, dtype)
        build_s = time.perf_counter() - t0
        route_attention(model, router)
        if state is not None:
            # The Ulysses plan comes from the model plugin's DenoiserSpec (omni_*.denoiser).
            model = parallelize_denoiser(model, router, state=state, registry=plugins)
        sync = self.ctx.platform.synchronize
        group = self.ctx.state.control_group

        with torch.inference_mode():
            for _ in range(payload["warmup"]):
                out = model(**inputs, return_dict=False)[0]
            sync(device)
            if state is not None:
                dist.barrier(group=group)
            times = []
            for _ in range(payload["iters"]):
                t = time.perf_counter()
                out = model(**inputs, return_dict=False)[0]
                sync(device)
                times.append(time.perf_counter() - t)
        mean = sum(times) / len(times)
        slowest = torch.tensor([mean], dtype=torch.float64)
        if state is not None:
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
        stats = self.ctx.platform.memory_stats(device)
        # A strided sample of the output (enough for a relative-error check, small to send).
        sample = out.float()
        while sample.numel() > 4_000_000:
            sample = sample[..., ::2]
        result = {
            "per_step_s": slowest.item(),
            "rank0_times_s": times,
            "build_s": build_s,
            "peak_memory_gib": stats.get("peak_allocated_bytes", 0) / 2**30,
            "tokens": _tokens(name, spec),
            "attention": router.names,
            "output_sample": sample.cpu(),
        }
        del model, inputs, out
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        return result


def _tokens(name: str, spec: dict[str, Any]) -> int:
    if name.startswith("wan"):
        _, f, h, w = spec["latents"]
        return f * (h // 2) * (w // 2)
    f, h, w = spec["grid"]
    return f * h * w


def _build(name: str, spec: dict[str, Any], device: Any, dtype: Any) -> tuple[Any, dict]:
    """The model with seeded random weights, built directly on the device, and its inputs."""
    import torch

    torch.manual_seed(0)
    with torch.device(device):  # initialise on the device: seconds, not minutes, for 20B
        if name.startswith("wan"):
            from diffusers import WanTransformer3DModel

            model = WanTransformer3DModel(**spec["config"])
        else:
            from diffusers import QwenImageTransformer2DModel

            model = QwenImageTransformer2DModel(**spec["config"])
    model = model.to(dtype=dtype).eval()
    # As from_pretrained(torch_dtype=bf16) does: the model's fp32 modules stay fp32.
    keep = set(getattr(model, "_keep_in_fp32_modules", None) or ())
    for module_name, module in model.named_modules():
        if keep & set(module_name.split(".")):
            module.float()
    for param_name, param in model.named_parameters():
        if keep & set(param_name.split(".")):
            param.data = param.data.float()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    g = torch.Generator("cpu").manual_seed(1)
    cfg = model.config
    if name.startswith("wan"):
        c, f, h, w = spec["latents"]
        latents = torch.randn(1, c, f, h, w, generator=g).to(device, dtype)
        text = torch.randn(2, spec["text"], cfg.text_dim, generator=g).to(device, dtype)
        tokens = f * (h // 2) * (w // 2)
        # TI2V's per-token timesteps (expand_timesteps): the same t on every token here.
        timestep = torch.full((2, tokens), 500.0, device=device)
        inputs = {
            "hidden_states": torch.cat([latents, latents]),
            "timestep": timestep,
            "encoder_hidden_states": text,
        }
    else:
        frames, gh, gw = spec["grid"]
        latents = torch.randn(1, frames * gh * gw, cfg.in_channels, generator=g).to(device, dtype)
        text = torch.randn(2, spec["text"], cfg.joint_attention_dim, generator=g).to(device, dtype)
        inputs = {
            "hidden_states": torch.cat([latents, latents]),
            "encoder_hidden_states": text,
            "encoder_hidden_states_mask": torch.ones(
                2, spec["text"], dtype=torch.long, device=device
            ),
            "timestep": torch.full((2,), 0.5, device=device, dtype=dtype),
            "img_shapes": [[(frames, gh, gw)]] * 2,
        }
    return model, inputs


def versions() -> dict[str, Any]:
    import importlib.metadata as md

    import torch

    found: dict[str, Any] = {"python": host_platform.python_version()}
    for dist_name in ("torch", "diffusers", "transformers", "omni-core"):
        try:
            found[dist_name] = md.version(dist_name)
        except md.PackageNotFoundError:
            found[dist_name] = None
    found["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        found["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        found["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/parallel-2xh200.json")
    parser.add_argument("--tiny", action="store_true", help="tiny configs (CPU/gloo smoke test)")
    parser.add_argument("--workloads", default="wan2.2-ti2v-5b,qwen-image")
    parser.add_argument("--layouts", default="single,cfg2,ulysses2")
    parser.add_argument(
        "--dtype",
        choices=["bfloat16", "float16", "float32"],
        default=None,
        help="default: bfloat16 on GPUs, float32 on CPU",
    )
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--iters", type=int, default=None)
    args = parser.parse_args(argv)
    warmup = args.warmup if args.warmup is not None else (1 if args.tiny else 3)
    iters = args.iters if args.iters is not None else (2 if args.tiny else 10)
    names = [n for n in args.workloads.split(",") if n]
    layouts = [n for n in args.layouts.split(",") if n]
    unknown = [n for n in names if n not in workloads(args.tiny)] + [
        n for n in layouts if n not in LAYOUTS
    ]
    if unknown:
        parser.error(f"unknown workload/layout: {', '.join(unknown)}")

    from omni_core.contract.platforms import current_platform

    platform = current_platform()
    report: dict[str, Any] = {
        "command": "python3 bench/parallel_bench.py "
        + shlex.join(sys.argv[1:] if argv is None else argv),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "platform": platform.describe(),
        "versions": versions(),
        "tiny": args.tiny,
        "warmup": warmup,
        "iters": iters,
        "dtype": args.dtype or ("bfloat16" if platform.device_type == "cuda" else "float32"),
        "workloads": {
            n: {k: v for k, v in workloads(args.tiny)[n].items() if k != "config"} for n in names
        },
        "results": {n: {} for n in names},
    }
    samples: dict[tuple[str, str], Any] = {}
    world = 1 if layouts == ["single"] else 2
    t0 = time.perf_counter()
    with ParallelLauncher(
        BenchProgram(args.tiny, args.dtype), ParallelConfig(ulysses_degree=world), platform=platform
    ) as launcher:
        report["startup_s"] = time.perf_counter() - t0
        for name in names:
            for layout_name in layouts:
                row = launcher.run(
                    {"workload": name, "layout": layout_name, "warmup": warmup, "iters": iters}
                )
                samples[(name, layout_name)] = row.pop("output_sample")
                row["world_size"] = LAYOUTS[layout_name].cfg_parallel_size * (
                    LAYOUTS[layout_name].ulysses_degree
                )
                report["results"][name][layout_name] = row
                print(
                    f"{name:16s} {layout_name:9s} {row['per_step_s'] * 1e3:9.1f} ms/step",
                    flush=True,
                )
    for name in names:
        rows = report["results"][name]
        base = rows.get("single")
        for layout_name, row in rows.items():
            if base is None or layout_name == "single":
                continue
            row["speedup_vs_single"] = base["per_step_s"] / row["per_step_s"]
            ref, got = samples[(name, "single")], samples[(name, layout_name)]
            row["rel_l2_vs_single"] = float((got - ref).norm() / ref.norm().clamp_min(1e-12))
            if name.startswith("wan") and layout_name in TARGETS:
                row["target_speedup"] = TARGETS[layout_name]
                row["meets_target"] = row["speedup_vs_single"] >= TARGETS[layout_name]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str))
    for name in names:
        for layout_name, row in report["results"][name].items():
            extra = ""
            if "speedup_vs_single" in row:
                extra = f"  x{row['speedup_vs_single']:.2f}  rel_l2 {row['rel_l2_vs_single']:.2e}"
            print(f"{name:16s} {layout_name:9s} {row['per_step_s'] * 1e3:9.1f} ms{extra}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
