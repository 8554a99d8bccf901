"""Where a Qwen2.5-Omni token2wav chunk decode spends its time, on the GPU (issue 26).

omni-qwen's own :class:`~omni_qwen.omni.qwen25_stages.Token2WavDecoder` (what ``omni serve``
runs for a streamed answer's chunk) over the 7B model's token2wav at its real sizes
(``omni_chat_bench.real_config``: DiT 1024 x 22, ECAPA speaker encoder, BigVGAN), random weights
in float32 as transformers runs it, one speaker, ``--context`` + ``--new`` codes per row:

- a decode's wall time with the DiT replayed as CUDA graphs and eager, at each ``--rows``;
- for one eager decode at one row: GPU time per DiT part (CUDA events around the modules'
  forwards: ``spk_encoder`` (the reference mel's ECAPA, recomputed at every one of the 36 ODE
  evaluations), the other input embeddings, the transformer blocks, the output norm), BigVGAN;
- the kernels of that decode (torch.profiler): count, busy time, the busiest ones;
- the speaker encoding computed once per decode (``FixedSpeaker``, the default) against the
  ECAPA run at every forward as transformers does: decode time per ``--rows`` (graphs on) and
  the waveform's largest difference between the two (lossless: the same kernels on the same
  input);
- the lossy ``token2wav_matmul=tf32`` option: decode time per ``--rows`` and the waveform's
  maximum difference and SNR against the fp32 decode of the same codes and seeds.

    source bench/gpu_env.sh
    python3 bench/token2wav_profile.py --out $OUT/token2wav-profile-h200.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _token2wav(device: str) -> Any:
    import torch
    from omni_chat_bench import real_config
    from transformers import Qwen2_5OmniConfig
    from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniToken2WavModel

    from omni_qwen.testing import qwen25_omni as tiny

    with tempfile.TemporaryDirectory() as folder:
        ids = tiny.write_tokenizer(Path(folder))
    raw = real_config(tiny.tiny_config(ids, max(ids.values()) + 1))
    config = Qwen2_5OmniConfig(**raw).token2wav_config
    with torch.device(device):
        model = Qwen2_5OmniToken2WavModel(config).float().eval()
    speaker = {"cond": torch.randn(192), "ref_mel": torch.randn(300, 80) * 0.5 - 5.0}
    return model, speaker


def _codes(rows: int, context: int, new: int, device: str) -> Any:
    import torch

    codes = torch.randint(0, 8000, (rows, 1, context + new), device=device)
    tails = torch.zeros(rows, 2, context + new, dtype=torch.long, device=device)
    tails[:, 1] = torch.arange(rows, device=device)[:, None]  # seed per row, speaker 0
    return torch.cat([codes, tails], dim=1)


def _time(decoder: Any, codes: Any, context: int, reps: int) -> float:
    import torch

    for _ in range(3):
        decoder.decode(codes, context)
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        decoder.decode(codes, context)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _parts(decoder: Any, codes: Any, context: int) -> dict[str, float]:
    """GPU ms per part over one eager decode (events around each forward, no sync inside)."""
    import torch

    t2w = decoder.token2wav
    dit = t2w.code2wav_dit_model
    parts = {
        "spk_encoder (ECAPA)": [dit.input_embed.spk_encoder],
        "input_embed other": [dit.input_embed.proj, dit.text_embed, dit.time_embed],
        "transformer_blocks": list(dit.transformer_blocks),
        "norm_out + proj_out": [dit.norm_out, dit.proj_out],
        "bigvgan": [t2w.code2wav_bigvgan_model],
    }
    events: dict[str, list[tuple[Any, Any]]] = {name: [] for name in parts}
    handles = []
    for name, modules in parts.items():
        for module in modules:

            def pre(_m: Any, _a: Any, name: str = name) -> None:
                start = torch.cuda.Event(enable_timing=True)
                start.record()
                events[name].append((start, None))

            def post(_m: Any, _a: Any, _o: Any, name: str = name) -> None:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                events[name][-1] = (events[name][-1][0], end)

            handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    torch.cuda.synchronize()
    start = time.perf_counter()
    decoder.decode(codes, context)
    torch.cuda.synchronize()
    wall = (time.perf_counter() - start) * 1e3
    for handle in handles:
        handle.remove()
    out = {name: sum(a.elapsed_time(b) for a, b in pairs) for name, pairs in events.items()}
    out["calls: spk_encoder"] = len(events["spk_encoder (ECAPA)"])
    out["wall"] = wall
    return out


def _kernels(decoder: Any, codes: Any, context: int) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        decoder.decode(codes, context)
        torch.cuda.synchronize()
    rows = [e for e in prof.key_averages() if e.device_time_total > 0]
    rows.sort(key=lambda e: -e.device_time_total)
    return {
        "kernels": sum(e.count for e in rows),
        "busy_ms": sum(e.self_device_time_total for e in rows) / 1e3,
        "top": [
            {"name": e.key[:90], "count": e.count, "ms": e.self_device_time_total / 1e3}
            for e in rows[:15]
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="1,8,32")
    parser.add_argument("--context", type=int, default=24)
    parser.add_argument("--new", type=int, default=24)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch
    import transformers

    from omni_qwen.omni.qwen25_stages import Token2WavDecoder

    torch.manual_seed(0)
    model, speaker = _token2wav("cuda")
    result: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "gpu": torch.cuda.get_device_name(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "context": args.context,
        "new": args.new,
        "decode_s": {},
    }
    for graphs in (True, False):
        decoder = Token2WavDecoder(model, [speaker], steps=10, left=args.context, graphs=graphs)
        with torch.inference_mode():
            for rows in map(int, args.rows.split(",")):
                codes = _codes(rows, args.context, args.new, "cuda")
                took = _time(decoder, codes, args.context, args.reps)
                result["decode_s"][f"{'graphs' if graphs else 'eager'} rows={rows}"] = took
                print(f"graphs={graphs} rows={rows}: {took * 1e3:.1f} ms", flush=True)
            if not graphs:
                codes = _codes(1, args.context, args.new, "cuda")
                result["eager_parts_ms"] = _parts(decoder, codes, args.context)
                result["eager_kernels"] = _kernels(decoder, codes, args.context)
    # the speaker encoding once per decode (default) against at every forward (transformers')
    once = Token2WavDecoder(model, [speaker], steps=10, left=args.context, graphs=True)
    every = Token2WavDecoder(model, [speaker], steps=10, left=args.context, graphs=True)
    every.speaker_encoding.enabled = False
    result["speaker_once"] = {}
    with torch.inference_mode():
        for rows in map(int, args.rows.split(",")):
            codes = _codes(rows, args.context, args.new, "cuda")
            slow, fast = (
                _time(every, codes, args.context, args.reps),
                _time(once, codes, args.context, args.reps),
            )
            want, got = every.decode(codes, args.context), once.decode(codes, args.context)
            result["speaker_once"][f"rows={rows}"] = {
                "decode_s": fast,
                "every_forward_decode_s": slow,
                "max_abs_diff_vs_every_forward": float((got - want).abs().max()),
            }
            print(f"speaker once rows={rows}: {result['speaker_once'][f'rows={rows}']}", flush=True)
    del once, every
    # the lossy option: TF32 matmuls (graphs on), its time and its cost against fp32
    exact = Token2WavDecoder(model, [speaker], steps=10, left=args.context, graphs=True)
    fast = Token2WavDecoder(model, [speaker], steps=10, left=args.context, graphs=True, tf32=True)
    result["tf32"] = {}
    with torch.inference_mode():
        for rows in map(int, args.rows.split(",")):
            codes = _codes(rows, args.context, args.new, "cuda")
            took = _time(fast, codes, args.context, args.reps)
            want, got = exact.decode(codes, args.context), fast.decode(codes, args.context)
            noise = float((got - want).pow(2).mean())
            result["tf32"][f"rows={rows}"] = {
                "decode_s": took,
                "max_abs_diff_vs_fp32": float((got - want).abs().max()),
                "snr_db_vs_fp32": 10 * math.log10(float(want.pow(2).mean()) / max(noise, 1e-30)),
            }
            print(f"tf32 rows={rows}: {result['tf32'][f'rows={rows}']}", flush=True)
    print(json.dumps({k: result[k] for k in ("eager_parts_ms", "eager_kernels")}, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
