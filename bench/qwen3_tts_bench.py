"""Qwen3-TTS on omni's autoregressive runtime: time to first audio and real-time factor.

    source bench/gpu_env.sh
    python3 bench/qwen3_tts_bench.py --sizes 1.7b,0.6b --concurrency 1,8,16,64 \\
        --out $OUT/qwen3-tts-h200.json                       # ~6-9 min on one H200
    python3 bench/qwen3_tts_bench.py --tiny --concurrency 1,4 --frames 24 --out /tmp/tiny.json

What runs is what ``omni serve`` runs: the checkpoint is written in the official layout
(``config.json``, ``generation_config.json``, ``model.safetensors``, tokenizer files,
``speech_tokenizer/``) with random weights at the real sizes (1.7B: talker 2048 wide, 28
layers; 0.6B: 1024 wide, 28 layers; code predictor 1024 wide, 5 layers; the 12 Hz codec
decoder and Mimi encoder at their published sizes), loaded with ``Omni(path)`` and served by
the engine (:class:`omni_core.runtime.engine.Engine`, one shared runtime step per loop iteration),
with
N requests submitted at once. Each request makes exactly ``--frames`` frames (``min_new_tokens``
holds the end token back: random weights never say when to stop), sampled with the
checkpoint's generation defaults (``--greedy``: argmax).

Reported per concurrency: time to first audio (submit -> first delta, mean/p50/p90), real-time
factor (submit -> last delta over seconds of audio), audio seconds made per wall second, mean
rows per decode step; per size: load time, parameters, peak GPU memory. The reference, in the
same run: the official ``qwen-tts`` when it can be imported (it pins transformers 4.57, so it
usually cannot), otherwise omni's own plain loop ``generate_codes`` (one request, DynamicCache,
whole-file codec) at batch 1 -- the JSON says which.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from stage_timer import StageTimer

ROOT = Path(__file__).resolve().parents[1]
TEXT = (
    "Streaming speech synthesis sends the first audio while the rest of the sentence is still "
    "being generated, so a listener hears the reply almost at once."
)
#: Real sizes (the published configs of Qwen/Qwen3-TTS-12Hz-{1.7B,0.6B}-CustomVoice).
TALKER = {
    "1.7b": {"hidden_size": 2048, "intermediate_size": 6144, "label": "1b7"},
    "0.6b": {"hidden_size": 1024, "intermediate_size": 3072, "label": "0b6"},
}
TARGETS = {1: (0.050, 0.15), 8: (0.100, 0.25)}  # concurrency -> (ttfa s, rtf) of issue 13


def _paths() -> None:
    try:
        import omni_qwen.tts  # noqa: F401
    except ImportError:  # a bare checkout
        for src in ("core/src", "plugins/omni-qwen/src"):
            sys.path.insert(0, str(ROOT / src))


def _real_configs(size: str, tokens: dict[str, int]) -> tuple[dict[str, Any], dict[str, Any]]:
    from transformers import MimiConfig

    from omni_qwen.testing.qwen3_tts import tiny_configs

    config, speech = tiny_configs("custom_voice", TALKER[size]["label"], tokens)
    talker = config["talker_config"]
    talker.update(
        vocab_size=3072,
        hidden_size=TALKER[size]["hidden_size"],
        intermediate_size=TALKER[size]["intermediate_size"],
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        text_hidden_size=2048,
        text_vocab_size=151936,
        max_position_embeddings=32768,
        rope_scaling={"rope_type": "default", "mrope_section": [24, 20, 20], "interleaved": True},
        codec_pad_id=2148,
        codec_bos_id=2149,
        codec_eos_token_id=2150,
        codec_think_id=2154,
        codec_nothink_id=2155,
        codec_think_bos_id=2156,
        codec_think_eos_id=2157,
        codec_language_id={"english": 2050, "german": 2052, "chinese": 2055},
        spk_id={"aiden": 2861, "serena": 3066, "ryan": 3061},
        spk_is_dialect={"aiden": False, "serena": False, "ryan": False},
    )
    talker["code_predictor_config"].update(
        vocab_size=2048,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=5,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=65,
    )
    speech["decoder_config"].update(
        codebook_size=2048,
        codebook_dim=512,
        hidden_size=512,
        latent_dim=1024,
        num_attention_heads=16,
        num_key_value_heads=16,
        head_dim=64,
        sliding_window=72,
        intermediate_size=1024,
        num_hidden_layers=8,
        decoder_dim=1536,
    )
    mimi = MimiConfig().to_dict()  # kyutai/mimi's sizes
    mimi.update(codebook_size=2048, num_quantizers=32, use_streaming=False)
    speech["encoder_config"] = {k: v for k, v in mimi.items() if not k.startswith("_")}
    return config, speech


def build_checkpoint(folder: Path, size: str, device: str) -> Path:
    """Random weights at the real size, saved in the official layout (bf16 talker)."""
    import torch
    from safetensors.torch import save_file

    from omni_qwen.testing.qwen3_tts import GENERATION, build_tiny_qwen3_tts, write_tokenizer
    from omni_qwen.tts.config import Qwen3TTSConfig, SpeechTokenizerConfig
    from omni_qwen.tts.speech_tokenizer import SpeechTokenizer, to_official_keys
    from omni_qwen.tts.talker import Talker

    if size == "tiny":
        return build_tiny_qwen3_tts(folder, "custom_voice")
    (folder / "speech_tokenizer").mkdir(parents=True, exist_ok=True)
    raw, raw_speech = _real_configs(size, write_tokenizer(folder))
    generator = torch.Generator(device).manual_seed(0)
    with torch.device("meta"):  # shapes only: weights are drawn one tensor at a time
        talker = Talker(Qwen3TTSConfig.from_dict(raw).talker)
    codec = SpeechTokenizer(SpeechTokenizerConfig.from_dict(raw_speech))  # real buffers
    for name, prefix, module, dtype in (
        ("model.safetensors", "talker.", talker, torch.bfloat16),
        ("speech_tokenizer/model.safetensors", "", codec, torch.float32),
    ):
        state = {}
        for key, tensor in module.state_dict().items():
            if not tensor.is_floating_point():
                value = tensor.to("cpu")
            elif any(s in key for s in ("norm", "scale", "usage", "gamma", "alpha", "beta")):
                value = (
                    torch.ones(tensor.shape, dtype=dtype)
                    if tensor.is_meta
                    else tensor.to("cpu", dtype)
                )
            else:
                value = (
                    torch.randn(tensor.shape, generator=generator, device=device, dtype=dtype)
                    .mul_(0.02)
                    .to("cpu")
                )
            state[prefix + key] = value.contiguous()
        if prefix == "":
            state = to_official_keys(state)
        save_file(state, str(folder / name))
        del state
    del talker, codec
    (folder / "config.json").write_text(json.dumps(raw, indent=2))
    (folder / "generation_config.json").write_text(json.dumps(GENERATION, indent=2))
    (folder / "speech_tokenizer" / "config.json").write_text(json.dumps(raw_speech, indent=2))
    return folder


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "mean": statistics.fmean(ordered),
        "p50": ordered[len(ordered) // 2],
        "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "max": ordered[-1],
    }


def run_level(
    omni: Any, engine: Any, concurrency: int, frames: int, greedy: bool, pipeline: Any = None
) -> dict[str, Any]:
    from omni_core.runtime.jobs import Job

    runtime = (pipeline or omni.pipeline).shared_runtime()
    steps, rows = runtime.steps, runtime.rows
    fields = {"voice": "aiden", "min_new_tokens": frames, "max_new_tokens": frames + 1}
    if greedy:
        fields["temperature"] = 0
    jobs, firsts = [], {}
    lock = threading.Lock()

    def first(job_id: str) -> Any:
        def sink(chunk: Any) -> None:
            with lock:
                firsts.setdefault(job_id, time.perf_counter())

        return sink

    requests = [omni.request(f"{TEXT} ({i:03d})", **fields) for i in range(concurrency)]
    started = time.perf_counter()
    for request in requests:
        job = Job(request, on_chunk=first(request.request_id))
        jobs.append((time.perf_counter(), engine.submit(job)))
    results = [(t0, job, job.future.result(3600), time.perf_counter()) for t0, job in jobs]
    wall = time.perf_counter() - started
    ttfa = [firsts[job.id] - t0 for t0, job, _, _ in results]
    audio = [len(r.audio) / r.sample_rate for _, _, r, _ in results]
    rtf = [(r.timings["total_s"]) / a for (_, _, r, _), a in zip(results, audio, strict=True)]
    made = runtime.steps - steps
    return {
        "concurrency": concurrency,
        "frames": frames,
        "audio_s_per_request": statistics.fmean(audio),
        "ttfa_s": _stats(ttfa),
        "rtf": _stats(rtf),
        "audio_s_per_wall_s": sum(audio) / wall,
        "decode_steps": made,
        "mean_rows_per_step": (runtime.rows - rows) / max(made, 1),
    }


def run_reference(omni: Any, frames: int, sync: Any) -> dict[str, Any]:
    from omni_qwen.tts.reference import decode_waveform, generate_codes

    model = omni.pipeline.model
    prompt = model.build_prompt(TEXT, speaker="aiden", language="auto")
    generate_codes(model, prompt, max_new_tokens=8, min_new_tokens=4)  # warm-up
    sync()
    t0 = time.perf_counter()
    codes = generate_codes(model, prompt, max_new_tokens=frames + 1, min_new_tokens=frames)
    wav = decode_waveform(model, codes)
    sync()
    total = time.perf_counter() - t0
    seconds = len(wav) / model.sample_rate
    return {
        "what": "omni's generate_codes + decode_waveform: one request, DynamicCache, greedy, "
        "whole-file codec (no streaming: first audio = all of it)",
        "frames": int(codes.shape[1]),
        "ttfa_s": total,
        "rtf": total / seconds,
    }


def mode_pipeline(omni: Any, mode: str) -> Any:
    """A fresh pipeline (its own runtime and cache) on the loaded model: ``mode`` is a
    ``cuda_graphs`` value, optionally followed by ``+option=value`` load options (e.g.
    ``on+fused_layers=off+codec_graphs=off``: the decode path before fused layers and codec
    graphs)."""
    from dataclasses import replace

    pipeline = omni.pipeline
    graphs, *rest = mode.split("+")
    extra = {**pipeline.options.extra, "cuda_graphs": graphs}
    extra.update(part.split("=", 1) for part in rest)
    options = replace(pipeline.options, extra=extra)
    fresh = type(pipeline)(pipeline.model, options)
    fresh.spec = pipeline.spec
    return fresh


def code_agreement(omni: Any, modes: list[str], frames: int) -> dict[str, Any]:
    """Greedy codes of one request under each decode path against the first path's: how many
    frames agree before the first difference (fused kernels round differently, and random
    weights give nearly tied logits, so a difference shows early when there is one)."""
    results: dict[str, Any] = {}
    base = None
    for mode in modes:
        pipeline = mode_pipeline(omni, mode)
        request = pipeline.validate(
            omni.request(
                TEXT, voice="aiden", temperature=0, min_new_tokens=frames,
                max_new_tokens=frames + 1,
            )
        )  # fmt: skip
        runtime = pipeline.shared_runtime()
        stream = pipeline.open(request)
        while not stream.done:
            runtime.step()
        codes = stream.all_codes().cpu()
        if base is None:
            base = codes
        same = (codes == base[:, : codes.shape[1]]).all(0) if codes.shape == base.shape else None
        first = int((~same).nonzero()[0, 0]) if same is not None and not same.all() else None
        results[mode] = {
            "frames": int(codes.shape[1]),
            "frames_equal": int(same.sum()) if same is not None else None,
            "first_difference_at_frame": first,
        }
        print(f"agreement {mode}: {results[mode]}", flush=True)
    return {"against": modes[0], "greedy": True, "paths": results}


def bench_mode(omni: Any, mode: str, args: argparse.Namespace, sync: Any) -> dict[str, Any]:
    """Every concurrency level with ``cuda_graphs=mode`` (then the ``--profile`` pass)."""
    from omni_core.runtime.engine import Engine

    pipeline = mode_pipeline(omni, mode)
    top = max(args.concurrency)
    engine = Engine(pipeline, name=f"qwen3-tts-{mode}", max_batch=top, max_queue=4 * top).start()
    try:
        t0 = time.perf_counter()
        run_level(omni, engine, min(8, top), 8, args.greedy, pipeline)  # warm-up (+ capture)
        warmup_s = time.perf_counter() - t0
        levels = []
        for concurrency in args.concurrency:
            level = run_level(omni, engine, concurrency, args.frames, args.greedy, pipeline)
            target = TARGETS.get(concurrency)
            if target is not None:
                level["target"] = {
                    "ttfa_s": target[0],
                    "rtf": target[1],
                    "met": level["ttfa_s"]["mean"] <= target[0]
                    and level["rtf"]["mean"] <= target[1],
                }
            levels.append(level)
            print(
                f"{pipeline.model.config.model_size} graphs={mode} c={concurrency:3d}: ttfa "
                f"{level['ttfa_s']['mean'] * 1e3:8.1f} ms "
                f"(p90 {level['ttfa_s']['p90'] * 1e3:.1f}), rtf {level['rtf']['mean']:.3f}, "
                f"{level['mean_rows_per_step']:.1f} rows/step",
                flush=True,
            )
    finally:
        engine.stop()
    report = pipeline.decode_report()
    print(
        f"graphs={mode}: decode path {report['path']} (warm-up incl. any capture {warmup_s:.1f} s)",
        flush=True,
    )
    print(f"  fused layers: {report.get('fused_layers')}; codec: {report.get('codec')}")
    for name, part in (report.get("stages") or {}).items():
        print(
            f"  {name}: {part['path']}, {part['captured']} graphs, {part['replays']} replays, "
            f"{part['eager_calls']} eager calls; reason: {part['reason']}",
            flush=True,
        )
    out = {"decode_path": report, "warmup_s": warmup_s, "levels": levels}
    if args.profile:
        out["profile"] = [
            profile_level(omni, mode, c, args, sync) for c in args.profile if c <= top
        ]
    return out


def profile_level(
    omni: Any, mode: str, concurrency: int, args: argparse.Namespace, sync: Any
) -> dict[str, Any]:
    """Per-stage time of one level (a separate, untimed pass: every stage call is wrapped in
    device synchronisations, so its wall time is its own; host work is the rest of the step)."""
    from omni_core.runtime.engine import Engine

    pipeline = mode_pipeline(omni, mode)
    runtime = pipeline.shared_runtime()
    stages = runtime.stages
    timer = StageTimer(sync)
    spent, calls = timer.spent, timer.calls
    timer.wrap(stages.decoder, "decode", "talker_step")
    timer.wrap(stages.decoder, "prefill", "talker_prefill")
    for i, stage in enumerate(stages.frame_stages):
        timer.wrap(stage, "run", "code_predictor" if i == 0 else f"frame_stage_{i}")
    timer.wrap(stages.codec, "decode", "codec_chunk")
    timer.wrap(runtime, "step", "step")
    engine = Engine(pipeline, name=f"qwen3-tts-profile-{mode}", max_batch=concurrency).start()
    try:
        run_level(omni, engine, concurrency, 8, args.greedy, pipeline)  # warm-up (+ capture)
        timer.clear()
        level = run_level(omni, engine, concurrency, args.frames, args.greedy, pipeline)
    finally:
        engine.stop()
        timer.restore()
    steps = max(calls.get("step", 1), 1)
    inner = sum(v for k, v in spent.items() if k != "step")
    stages_ms = {
        k: {
            "total_ms": v * 1e3,
            "calls": calls[k],
            "ms_per_call": v * 1e3 / calls[k],
            "ms_per_step": v * 1e3 / steps,
        }
        for k, v in spent.items()
        if k != "step"
    }
    host = spent.get("step", 0.0) - inner
    stages_ms["host_work"] = {"total_ms": host * 1e3, "ms_per_step": host * 1e3 / steps}
    summary = ", ".join(f"{k} {v['ms_per_step']:.2f}" for k, v in stages_ms.items())
    print(f"profile graphs={mode} c={concurrency}: ms/step: {summary}", flush=True)
    return {
        "concurrency": concurrency,
        "steps": steps,
        "step_ms": spent.get("step", 0.0) * 1e3 / steps,
        "stages": stages_ms,
        "rtf_with_syncs": level["rtf"]["mean"],
        "decode_path": pipeline.decode_report()["path"],
    }


def bench_size(size: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import torch

    from omni_core import Omni

    cuda = torch.cuda.is_available() and not args.cpu
    device = "cuda" if cuda else "cpu"
    t0 = time.perf_counter()
    folder = build_checkpoint(workdir / size, size, device)
    build_s = time.perf_counter() - t0

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    dtype = "bfloat16" if cuda else "float32"
    chunks = {"first_chunk_frames": args.first_chunk_frames, "chunk_frames": args.chunk_frames}
    omni = Omni(folder, device=device, dtype=dtype, **chunks)
    sync()
    load_s = time.perf_counter() - t0
    params = sum(p.numel() for p in omni.pipeline.model.parameters())
    modes = {}
    for mode in args.graphs:
        modes[mode] = bench_mode(omni, mode, args, sync)
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    agreement = code_agreement(omni, args.agreement, args.frames) if args.agreement else None
    reference = run_reference(omni, args.frames, sync)
    print(
        f"{size} reference: first audio {reference['ttfa_s'] * 1e3:.1f} ms, "
        f"rtf {reference['rtf']:.3f}",
        flush=True,
    )
    main_mode = "on" if "on" in modes else args.graphs[0]
    levels = modes[main_mode]["levels"]
    peak = torch.cuda.max_memory_allocated() if cuda else None
    del omni
    return {
        "size": size,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "dtype": dtype,
        "chunk_frames": chunks,
        "parameters": params,
        "checkpoint_build_s": build_s,
        "load_s": load_s,
        "peak_memory_bytes": peak,
        "levels": levels,
        "levels_are_graphs": main_mode,
        "graphs": modes,
        "reference": reference,
        "code_agreement": agreement,
    }


def main() -> int:
    _paths()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1.7b,0.6b", help="1.7b, 0.6b (comma-separated)")
    parser.add_argument("--tiny", action="store_true", help="the tiny test checkpoint (CPU)")
    parser.add_argument("--concurrency", default="1,8,16,64")
    parser.add_argument("--frames", type=int, default=100, help="frames per request (80 ms each)")
    parser.add_argument("--greedy", action="store_true")
    parser.add_argument("--first-chunk-frames", type=int, default=2)
    parser.add_argument("--chunk-frames", type=int, default=8)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument(
        "--graphs",
        default="off,on",
        help="decode paths to measure: cuda_graphs modes (off, on, static), each optionally "
        "with +option=value load options (on+fused_layers=off)",
    )
    parser.add_argument(
        "--profile",
        default="",
        help="concurrency levels of an extra per-stage pass (synchronised, untimed), e.g. 1,8",
    )
    parser.add_argument(
        "--agreement",
        default="",
        help="decode paths whose greedy codes are compared with the first one's, e.g. "
        "on+fused_layers=off,on",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.graphs = [g.strip().lower() for g in args.graphs.split(",") if g.strip()]
    args.agreement = [g.strip().lower() for g in args.agreement.split(",") if g.strip()]
    args.profile = [int(c) for c in args.profile.split(",") if c.strip()]
    sizes = ["tiny"] if args.tiny else [s.strip().lower() for s in args.sizes.split(",")]
    import torch
    import transformers

    qwen_tts = importlib.util.find_spec("qwen_tts") is not None
    report: dict[str, Any] = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "qwen_tts_available": qwen_tts,
        "reference_note": (
            "qwen-tts is importable here but pins transformers 4.57; it is not run in this "
            "process: the reference is omni's own plain loop at batch 1"
            if qwen_tts
            else "qwen-tts is not installed on this machine: the reference is omni's own plain "
            "loop (generate_codes, DynamicCache, batch 1), measured in the same run"
        ),
        "targets": {str(k): {"ttfa_s": v[0], "rtf": v[1]} for k, v in TARGETS.items()},
        "results": [],
    }
    with tempfile.TemporaryDirectory(prefix="qwen3-tts-bench-") as tmp:
        for size in sizes:
            report["results"].append(bench_size(size, args, Path(tmp)))
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
