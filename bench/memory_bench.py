"""Memory features of issue #16 on one GPU, omni against diffusers in the same run.

    source bench/gpu_env.sh
    python3 bench/memory_bench.py --out $OUT/memory-h200.json          # qwen-image-1024
    python3 bench/memory_bench.py --tiny --out /tmp/memory-tiny.json   # CPU smoke test

The checkpoint folder is the ``qwen-image-1024`` workload's (omni_qwen.bench: real-size 20B
transformer and VAE, random bf16 weights), built or reused by the benchmark runner's own
``ensure_checkpoint`` under ``--work-dir`` (the same cache bench/pipeline_bench.py uses), and
the requests are the workload's (1024x1024, true CFG 4, a negative prompt). Three parts
(``--parts``), every mode loaded, measured and freed in turn:

* ``offload``: ``Omni(offload="block")`` against no offload and diffusers'
  ``enable_group_offload`` (block level, one block per group, side stream on CUDA) at
  ``--offload-steps``: seconds, seconds per step, peak device memory, PSNR of omni's offloaded
  output against its own non-offloaded one (identical: 100 dB);
* ``fused``: a rank-``--rank`` random LoRA on every attention and MLP projection of the 60
  blocks, fused at load (``fuse_lora``), ``--fused-steps`` steps at guidance 1 as a step distill
  runs; omni fused, omni base (no LoRA, same steps) and diffusers (``load_lora_weights`` +
  ``fuse_lora`` + ``unload_lora_weights``) with PSNR against diffusers;
* ``switch``: two rank-``--rank`` adapters held per request: the request time with the same
  adapter each time, alternating between the two (one ``set_adapters`` per switch: its time
  from the adapter set's stats), and with an LRU of one (every switch unloads one adapter and
  loads the other from host memory), against the same model without LoRA.

torch.compile is off in every mode (the eager comparison; block offload streams weights around
compiled regions otherwise). Each row says what it measured; ``--reps`` timed repetitions
follow one untimed warm-up request per mode.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGETS = (
    "to_q",
    "to_k",
    "to_v",
    "to_out.0",
    "add_q_proj",
    "add_k_proj",
    "add_v_proj",
    "to_add_out",
    "img_mlp.net.0.proj",
    "img_mlp.net.2",
    "txt_mlp.net.0.proj",
    "txt_mlp.net.2",
)


def _bootstrap() -> None:
    try:
        import omni_core  # noqa: F401
    except ImportError:  # a bare checkout: the sources, and the model plugin by hand
        for src in ("core/src", "plugins/omni-qwen/src"):
            sys.path.insert(0, str(ROOT / src))
        from omni_core.contract.host import get_host

        if "omni-qwen" not in get_host().plugins:
            get_host().load_module("omni-qwen", "omni_qwen.plugin")


class Bench:
    """The shared state of one run: workload, folder, device, and the rows written."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        from omni_core.bench.checkpoints import default_work_dir, ensure_checkpoint
        from omni_core.bench.runner import select_workloads
        from omni_core.contract.host import get_registry
        from omni_core.contract.platforms import current_platform

        self.args = args
        name = "tiny-qwen" if args.tiny else args.workload
        ((spec, workload),) = select_workloads(get_registry(), [name], tiny=args.tiny)
        self.workload = workload if spec.tiny else workload.with_layers(args.layers)
        work_dir = Path(args.work_dir) if args.work_dir else default_work_dir()
        self.checkpoint = ensure_checkpoint(self.workload, work_dir)
        self.folder = Path(self.checkpoint["path"])
        self.platform = current_platform()
        self.device = self.platform.device(0)
        self.dtype = torch.float32 if self.platform.device_type == "cpu" else torch.bfloat16
        self.rows: list[dict[str, Any]] = []
        self.lora_dir = work_dir / f"{self.workload.key}-loras-r{args.rank}"

    # -- measurement -----------------------------------------------------------------------

    def series(self, run: Any) -> tuple[dict[str, Any], Any]:
        """One warm-up call of ``run(clock)``, then ``--reps`` timed ones: summary, last value."""
        from omni_core.bench.measure import run_series

        result = run_series(self.platform, self.device, run, self.args.reps)
        return result.summary(), result.last_value

    def omni_request(self, steps: int, **overrides: Any) -> dict[str, Any]:
        return {**self.workload.request(), "num_inference_steps": steps, **overrides}

    def omni_series(self, omni: Any, request: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        def run(clock: Any) -> Any:
            return omni.generate(progress=clock, **request)

        return self.series(run)

    def reference_series(self, pipe: Any, request: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        def run(clock: Any) -> Any:
            return self.workload.run_reference(pipe, request, on_step=clock)

        return self.series(run)

    def add(self, part: str, mode: str, summary: dict[str, Any], **extra: Any) -> None:
        row = {"part": part, "mode": mode, **summary, **extra}
        self.rows.append(row)
        print(json.dumps(row, default=str), flush=True)
        self.write()

    def write(self) -> None:
        out = Path(self.args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "command": "python3 bench/memory_bench.py " + " ".join(sys.argv[1:]),
            "workload": self.workload.name,
            "checkpoint": self.checkpoint,
            "device": self.platform.describe(),
            "device_name": _device_name(),
            "rank": self.args.rank,
        }
        out.write_text(json.dumps({"meta": meta, "rows": self.rows}, indent=2, default=str))

    def psnr(self, reference: Any, ours: Any, against: str) -> dict[str, Any]:
        from omni_core.bench.measure import psnr_fields

        return psnr_fields(reference, self.workload.omni_frames(ours), against)

    # -- models ----------------------------------------------------------------------------

    def omni(self, **kwargs: Any) -> Any:
        from omni_core import Omni

        t0 = time.perf_counter()
        omni = Omni(self.folder, compile=False, **kwargs)
        omni.bench_load_s = round(time.perf_counter() - t0, 2)
        return omni

    def reference(self, device: Any) -> Any:
        return self.workload.load_reference(self.folder, device, self.dtype)

    def loras(self) -> dict[str, Path]:
        """Two random rank-``--rank`` adapters of the transformer (built on the meta device)."""
        import diffusers
        import torch

        from omni_core.testing.lora import build_tiny_lora

        out = {}
        config = diffusers.QwenImageTransformer2DModel.load_config(self.folder / "transformer")
        for seed, name in enumerate(("style-a", "style-b"), start=1):
            path = self.lora_dir / f"{name}.safetensors"
            if not path.exists():
                with torch.device("meta"):
                    model = diffusers.QwenImageTransformer2DModel.from_config(config)
                build_tiny_lora(
                    model,
                    path,
                    save=diffusers.QwenImagePipeline.save_lora_weights,
                    rank=self.args.rank,
                    seed=seed,
                    std=0.01,
                    target_modules=TARGETS,
                    dtype=self.dtype,
                )
            out[name] = path
        return out


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def _free() -> None:
    """Free what the caller dropped (``del`` it first): the next mode's peak must not see it."""
    import torch

    from omni_core.bench.measure import release

    release()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# -- the parts ------------------------------------------------------------------------------


def part_offload(bench: Bench) -> None:
    steps = bench.args.offload_steps
    modes = set(bench.args.offload_modes.split(","))
    request = bench.omni_request(steps)
    omni = bench.omni()
    summary, base = bench.omni_series(omni, request)
    bench.add("offload", "omni-none", summary, steps=steps, load_s=omni.bench_load_s)
    del omni
    _free()
    if "block" in modes:
        _omni_block(bench, request, base)
    if "diffusers" in modes:
        _diffusers_block(bench, request, base)
    del base
    _free()


def _omni_block(bench: Bench, request: dict[str, Any], base: Any) -> None:
    steps = bench.args.offload_steps
    omni = bench.omni(offload="block")
    summary, ours = bench.omni_series(omni, request)
    bench.add(
        "offload",
        "omni-block",
        summary,
        steps=steps,
        load_s=omni.bench_load_s,
        offload=omni.pipeline.offload.as_dict(),
        **bench.psnr(bench.workload.omni_frames(base), ours, "omni_none"),
    )
    del omni, ours
    _free()


def _diffusers_block(bench: Bench, request: dict[str, Any], base: Any) -> None:
    import torch

    steps = bench.args.offload_steps
    pipe = bench.reference("cpu")
    stream = torch.cuda.is_available()
    # The VAE stays whole on the device (as omni's block offload keeps it): diffusers' block-level
    # hooks do not cover QwenImage's VAE decode, which calls post_quant_conv outside its blocks.
    pipe.enable_group_offload(
        onload_device=bench.device,
        offload_device=torch.device("cpu"),
        offload_type="block_level",
        num_blocks_per_group=1,
        use_stream=stream,
        non_blocking=stream,
        exclude_modules=["vae"],
    )
    pipe.vae.to(bench.device)
    summary, ref = bench.reference_series(pipe, request)
    bench.add(
        "offload",
        "diffusers-group-offload",
        summary,
        steps=steps,
        **bench.psnr(bench.workload.reference_frames(ref), base, "diffusers_offload"),
    )
    del pipe, ref
    _free()


def part_fused(bench: Bench) -> None:
    steps = bench.args.fused_steps
    request = bench.omni_request(steps, guidance_scale=1.0)
    lora = bench.loras()["style-a"]
    omni = bench.omni()
    summary, _ = bench.omni_series(omni, request)
    bench.add("fused", "omni-base", summary, steps=steps)
    del omni
    _free()

    t0 = time.perf_counter()
    omni = bench.omni(lora={"distill": str(lora)}, fuse_lora="distill")
    fuse_s = round(time.perf_counter() - t0, 2)
    summary, ours = bench.omni_series(omni, request)
    fused = omni.pipeline.adapters.fused
    del omni
    _free()

    pipe = bench.reference(bench.device)
    t0 = time.perf_counter()
    pipe.load_lora_weights(str(lora.parent), weight_name=lora.name, adapter_name="distill")
    pipe.fuse_lora(lora_scale=1.0, adapter_names=["distill"])
    pipe.unload_lora_weights()
    ref_fuse_s = round(time.perf_counter() - t0, 2)
    ref_summary, ref = bench.reference_series(pipe, request)
    bench.add("fused", "diffusers-fused", ref_summary, steps=steps, fuse_s=ref_fuse_s)
    bench.add(
        "fused",
        "omni-fused",
        summary,
        steps=steps,
        load_with_fuse_s=fuse_s,
        lora_bytes=fused["bytes"],
        **bench.psnr(bench.workload.reference_frames(ref), ours, "diffusers"),
    )
    del pipe, ours, ref
    _free()


def part_switch(bench: Bench) -> None:
    steps = bench.args.switch_steps
    loras = bench.loras()
    omni = bench.omni(lora={name: str(path) for name, path in loras.items()})
    adapters = omni.pipeline.adapters
    base = bench.omni_request(steps)
    names = list(loras)

    def timed_requests(omni: Any, pattern: list[Any]) -> dict[str, Any]:
        times = []
        for lora in pattern:
            bench.platform.synchronize(bench.device)
            t0 = time.perf_counter()
            omni.generate(**base, **({"lora": lora} if lora else {}))
            bench.platform.synchronize(bench.device)
            times.append(time.perf_counter() - t0)
        steady = times[1:] or times  # the first pays the first switch to this pattern
        return {"request_s": round(statistics.median(steady), 4), "requests": len(times)}

    n = max(bench.args.reps, 2) + 1
    rows = {
        "no-lora": timed_requests(omni, [None] * n),
        "same-adapter": timed_requests(omni, [names[0]] * n),
    }
    before = dict(adapters.stats)
    rows["alternating"] = timed_requests(omni, [names[i % 2] for i in range(n)])
    switches = adapters.stats["switches"] - before["switches"]
    switch_ms = 1000 * (adapters.stats["switch_s"] - before["switch_s"]) / max(switches, 1)
    rows["alternating"]["set_adapters_ms"] = round(switch_ms, 3)
    adapters.max_active = 1  # an LRU of one: every switch unloads one and loads the other
    before = dict(adapters.stats)
    rows["alternating-lru-1"] = timed_requests(omni, [names[i % 2] for i in range(n)])
    switches = adapters.stats["switches"] - before["switches"]
    reload_ms = 1000 * (adapters.stats["switch_s"] - before["switch_s"]) / max(switches, 1)
    rows["alternating-lru-1"]["switch_with_reload_ms"] = round(reload_ms, 3)
    rows["alternating-lru-1"]["evictions"] = adapters.stats["evictions"] - before["evictions"]
    for mode, summary in rows.items():
        bench.add("switch", f"omni-{mode}", summary, steps=steps, rank=bench.args.rank)
    del omni, adapters
    _free()


PARTS = {"offload": part_offload, "fused": part_fused, "switch": part_switch}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--workload", default="qwen-image-1024")
    parser.add_argument("--tiny", action="store_true", help="the tiny workload, on the CPU")
    parser.add_argument("--work-dir", default=None, help="checkpoint cache (the runner's)")
    parser.add_argument("--layers", type=int, default=None, help="fewer transformer blocks")
    parser.add_argument("--parts", default="offload,fused,switch")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--rank", type=int, default=64)
    parser.add_argument("--offload-steps", type=int, default=20)
    parser.add_argument(
        "--offload-modes", default="block,diffusers", help="beside omni-none: block, diffusers"
    )
    parser.add_argument("--fused-steps", type=int, default=8)
    parser.add_argument("--switch-steps", type=int, default=8)
    args = parser.parse_args()
    if args.tiny and args.rank == 64:
        args.rank = 4
    _bootstrap()
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    bench = Bench(args)
    for part in args.parts.split(","):
        PARTS[part.strip()](bench)
    print(f"wrote {args.out} ({len(bench.rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
