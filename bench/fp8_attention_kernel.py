"""fp8 attention kernel vs cuDNN bf16 SDPA at the shapes that dominate omni's diffusion steps.

    python3 bench/fp8_attention_kernel.py --out $OUT/fp8_attention_kernel_h200.json   # H200
    python3 bench/fp8_attention_kernel.py --cpu --tiny --out /tmp/fp8_kernel_tiny.json  # CPU check

Shapes (``[batch, seq, heads, head_dim]``, bf16, random normal q/k/v, k with a per-channel
offset as real keys have):

- ``wan2.1-14b-480p-self``: 832x480, 81 frames = 21x30x52 = 32,760 tokens, 40 heads x 128,
  batch 1 (one CFG branch) and 2 (both branches batched);
- ``wan2.1-14b-480p-cross``: the same queries against 512 text tokens (left exact by ``--fp8``);
- ``qwen-image-1024-joint``: 64x64 = 4,096 image + 128 text tokens, 24 heads x 128, batch 2
  (true CFG batched), and ``-padded``: the same with the second row's last 48 text keys masked
  (a negative prompt shorter than the prompt: a boolean key-padding mask).

Modes: ``sdpa-cudnn`` (torch SDPA pinned to cuDNN, bf16: what omni runs today; ``sdpa``, torch's
own kernel choice, on the masked shape), ``fp8-cudnn``
(omni-attention-fp8's backend end to end: quantize, kernel, dequantize, eager),
``fp8-cudnn-compiled`` (the same under ``torch.compile``, where the quantization fuses),
``fp8-cudnn-kernel`` (the cuDNN call alone on pre-quantized inputs). Each row has the median
milliseconds of ``--reps`` timed calls after ``--warmup``, TFLOP/s (``4 * B * H * Sq * Skv * D``
per call) and the error against float32 SDPA on the first ``--error-queries`` query rows (the
relative RMS error, the max abs error, and for fp8 the agreement with ``fp8-emulated`` on the
same rows). On CPU (``--cpu``) the modes are torch SDPA and ``fp8-emulated``; ``fp8-cudnn``
rows carry the reason it cannot run. Everything goes to ``--out`` (JSON) with the command.
"""

from __future__ import annotations

import argparse
import json
import os
import platform as host_platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: name -> (batches, q_len, kv_len, heads, head_dim, padded text keys of the second row)
SHAPES: dict[str, tuple[tuple[int, ...], int, int, int, int, int]] = {
    "wan2.1-14b-480p-self": ((1, 2), 32760, 32760, 40, 128, 0),
    "wan2.1-14b-480p-cross": ((1,), 32760, 512, 40, 128, 0),
    "qwen-image-1024-joint": ((2,), 4224, 4224, 24, 128, 0),
    # batched true CFG with prompts of different lengths: a key-padding mask on the text keys
    "qwen-image-1024-joint-padded": ((2,), 4224, 4224, 24, 128, 48),
}
TINY_SHAPES: dict[str, tuple[tuple[int, ...], int, int, int, int, int]] = {
    "tiny-self": ((1, 2), 384, 384, 2, 64, 0),
    "tiny-cross": ((1,), 384, 32, 2, 64, 0),
    "tiny-joint-padded": ((2,), 160, 160, 2, 64, 24),
}
#: Text tokens at the front of a joint sequence (Qwen-Image: [text, image]).
TEXT_TOKENS = 128


def _paths() -> None:
    """Use the working tree when omni is not installed (the GPU machine)."""
    for sub in ("core/src", "plugins/omni-attention-fp8/src"):
        path = str(ROOT / sub)
        if path not in sys.path:
            sys.path.insert(0, path)


def _inputs(batch: int, sq: int, skv: int, heads: int, dim: int, device: Any) -> tuple:
    import torch

    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(batch, sq, heads, dim, generator=g)
    k = torch.randn(batch, skv, heads, dim, generator=g) + torch.randn(
        1, 1, heads, dim, generator=g
    )
    v = torch.randn(batch, skv, heads, dim, generator=g)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return tuple(t.to(device=device, dtype=dtype) for t in (q, k, v))


def _time(fn: Callable[[], Any], device: Any, warmup: int, reps: int) -> float:
    """Median milliseconds of ``reps`` calls (CUDA events on a GPU, no host sync between)."""
    import torch

    for _ in range(warmup):
        fn()
    times = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _errors(out: Any, reference: Any, rows: int) -> dict[str, float]:
    diff = out[:, :rows].double() - reference.double()
    return {
        "rel_rms_err_vs_fp32": round(float(diff.norm() / reference.double().norm()), 5),
        "max_abs_err_vs_fp32": round(float(diff.abs().max()), 5),
    }


def _modes(device: Any) -> dict[str, Callable[..., Any]]:
    """Mode name -> ``fn(q, k, v)``; the fp8-cudnn ones only where the kernel can run."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from omni_attention_fp8.emulated import fp8_emulated
    from omni_core.runtime import sdpa

    if device.type != "cuda":
        return {"sdpa": sdpa, "fp8-emulated": fp8_emulated}

    def sdpa_cudnn(q: Any, k: Any, v: Any, attn_mask: Any = None) -> Any:
        if attn_mask is not None:  # torch's own choice: its cuDNN kernel may refuse masks
            return sdpa(q, k, v, attn_mask=attn_mask)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return sdpa(q, k, v)

    from omni_attention_fp8.cudnn_kernel import fp8_cudnn

    return {
        "sdpa-cudnn": sdpa_cudnn,
        "fp8-cudnn": fp8_cudnn,
        "fp8-cudnn-compiled": torch.compile(fp8_cudnn, fullgraph=True, dynamic=False),
    }


def _bind(fn: Callable[..., Any], q: Any, k: Any, v: Any, mask: Any) -> Callable[[], Any]:
    return lambda: fn(q, k, v, attn_mask=mask)


def _padding_mask(batch: int, kv_len: int, padded: int, device: Any) -> Any:
    """None, or a boolean ``[B, 1, 1, keys]`` mask dropping the second row's last ``padded``
    text keys (the text is the first :data:`TEXT_TOKENS` keys)."""
    import torch

    if not padded:
        return None
    keep = torch.ones(batch, kv_len, dtype=torch.bool, device=device)
    keep[1:, TEXT_TOKENS - padded : TEXT_TOKENS] = False
    return keep[:, None, None, :]


def _kernel_only(q: Any, k: Any, v: Any, mask: Any) -> Callable[[], Any]:
    """The cuDNN call alone, on inputs quantized (and keys reordered) once beforehand."""
    from omni_attention_fp8.cudnn_kernel import sdpa_fp8
    from omni_attention_fp8.scales import center_keys, compute_scales, quantize, valid_keys_first

    lens = None
    if mask is not None:
        k, v, lens = valid_keys_first(mask.reshape(mask.shape[0], -1), k, v)
    kc = center_keys(k)
    s = compute_scales(q, kc, v)
    q8, k8, v8 = quantize(q, s.q), quantize(kc, s.k), quantize(v, s.v)
    scale = q.shape[-1] ** -0.5
    return lambda: sdpa_fp8(q8, k8, v8, s.qk_descale, scale, lens)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from omni_attention_fp8.cudnn_graph import fp8_cudnn_available
    from omni_attention_fp8.emulated import fp8_emulated
    from omni_attention_fp8.layout import GraphKey, attention_flops
    from omni_core.runtime import sdpa

    device = torch.device("cpu" if args.cpu else "cuda")
    availability = fp8_cudnn_available()
    modes = _modes(device)
    if device.type == "cuda" and not availability.available:
        raise SystemExit(f"fp8-cudnn cannot run here: {availability.reason}")
    shapes = TINY_SHAPES if args.tiny else SHAPES
    rows: list[dict[str, Any]] = []
    for name, (batches, sq, skv, heads, dim, padded) in shapes.items():
        for batch in batches:
            q, k, v = _inputs(batch, sq, skv, heads, dim, device)
            mask = _padding_mask(batch, skv, padded, device)
            key = GraphKey(batch, heads, sq, skv, dim, dim, dim**-0.5, 0)
            flops = attention_flops(key)
            n = min(args.error_queries, sq)
            reference = sdpa(q[:, :n].float(), k.float(), v.float(), attn_mask=mask)
            head = q[:, :n].contiguous()
            emulated = fp8_emulated(head, k, v, attn_mask=mask).float()
            base = {"shape": name, "batch": batch, "q_len": sq, "kv_len": skv, "heads": heads,
                    "head_dim": dim, "padded_text_keys": padded,
                    "dtype": str(q.dtype).removeprefix("torch."),
                    "tflop_per_call": round(flops / 1e12, 4)}  # fmt: skip
            calls = {m: _bind(fn, q, k, v, mask) for m, fn in modes.items()}
            if device.type == "cuda":
                calls["fp8-cudnn-kernel"] = _kernel_only(q, k, v, mask)
            for mode, call in calls.items():
                label = "sdpa" if mode == "sdpa-cudnn" and mask is not None else mode
                row = {**base, "mode": label}
                try:
                    ms = _time(call, device, args.warmup, args.reps)
                    tflops = flops / (ms * 1e-3) / 1e12
                    row.update(ms=round(ms, 4), tflops=round(tflops, 1 if tflops >= 10 else 5))
                    if mode != "fp8-cudnn-kernel":
                        row.update(_errors(call(), reference, n))
                    if mode.startswith("fp8-cudnn") and mode != "fp8-cudnn-kernel":
                        # the same query rows through both: same scales, so only the kernel's
                        # tiling and rounding order differ from the emulation
                        same = _errors(modes[mode](head, k, v, attn_mask=mask), emulated, n)
                        row["rel_rms_diff_vs_fp8_emulated"] = same["rel_rms_err_vs_fp32"]
                except Exception as exc:  # noqa: BLE001 - a failing mode is a row; go on
                    row["error"] = f"{type(exc).__name__}: {exc}"[:500]
                rows.append(row)
                print(json.dumps(row), flush=True)
            if device.type != "cuda":
                why = "runs on CUDA only" + (
                    f"; here: {availability.reason}" * bool(availability.reason)
                )
                rows.append({**base, "mode": "fp8-cudnn", "error": why})
            del q, k, v, mask, head, reference, emulated
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return {"meta": _meta(args, device), "rows": rows}


def _meta(args: argparse.Namespace, device: Any) -> dict[str, Any]:
    import importlib.metadata

    import torch

    meta: dict[str, Any] = {
        "command": "python3 bench/fp8_attention_kernel.py " + shlex.join(sys.argv[1:]),
        "torch": torch.__version__,
        "host": host_platform.node(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "warmup": args.warmup,
        "reps": args.reps,
        "inputs": "random normal q, v; k normal plus a per-channel offset; seed 0",
    }
    try:
        meta["nvidia-cudnn-frontend"] = importlib.metadata.version("nvidia-cudnn-frontend")
        import cudnn  # type: ignore[import-not-found]

        meta["cudnn_backend"] = int(cudnn.backend_version())
    except Exception as exc:  # noqa: BLE001 - reported, not fatal (CPU runs have no cudnn)
        meta["cudnn_frontend_error"] = f"{type(exc).__name__}: {exc}"[:200]
    return meta


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "fp8.json")
    parser.add_argument("--cpu", action="store_true", help="Run on CPU (fp8-emulated only).")
    parser.add_argument("--tiny", action="store_true", help="Small shapes (a smoke run).")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--error-queries", type=int, default=2048)
    args = parser.parse_args()
    _paths()
    result = measure(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out} ({len(result['rows'])} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
