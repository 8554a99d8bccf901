"""Qwen2.5-Omni on omni's chat runtime vs transformers' ``generate`` in the same run.

Long because one GPU call holds it all: both sides, the graphed-vs-eager comparison and the
per-stage profile share one loaded 7B model.

    source bench/gpu_env.sh
    python3 bench/omni_chat_bench.py --out $OUT/omni-chat-h200.json     # ~90-120 s on one H200
    python3 bench/omni_chat_bench.py --tiny --concurrency 1,2 --out /tmp/omni-chat-tiny.json

The model is ``Qwen2_5OmniForConditionalGeneration`` at the Qwen2.5-Omni-7B sizes (thinker
3584 x 28 layers with its vision and audio towers, talker 896 x 24, token2wav DiT 1024 x 22 +
BigVGAN) with random weights initialised directly on the GPU in bf16 (token2wav float32, as
transformers runs it): no checkpoint is written, so the run fits the GPU budget. The tokenizer
and processor files are the tiny checkpoint's (token ids only need to be in range). omni's side
is the real serving path below the HTTP layer: ``Qwen25OmniPipeline`` and its
``ChatRuntime``, N requests opened at once and the runtime stepped as the engine steps it
(one step per loop, streams polled). Every request asks for text + audio, greedy, exactly
``--max-tokens`` text tokens (no stop ids: random weights) and at most ``--talker-frames``
codes; token2wav streams chunks of ``--chunk-frames`` codes, the first of
``--first-chunk-frames`` (``--chunk-frames 0``: the whole answer at once).

Reported per concurrency: time to first text token, time to first audio, decode tokens/s per
request and in all, audio seconds made and RTF (request wall time / its audio seconds); for
transformers (``generate`` with the same prompts batched, talker greedy): wall time (= its time
to first token and first audio: it streams nothing), tokens/s, RTF.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from stage_timer import StageTimer

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Tell me about the sound of the sea in the morning, number {:03d}."


def _paths() -> None:
    try:
        import omni_qwen.omni  # noqa: F401
    except ImportError:  # a bare checkout
        for src in ("core/src", "plugins/omni-qwen/src"):
            sys.path.insert(0, str(ROOT / src))


def real_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The tiny config with the Qwen2.5-Omni-7B sizes (token ids stay the tiny tokenizer's)."""
    rope = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]}
    thinker = raw["thinker_config"]
    thinker["audio_config"].update(
        encoder_layers=32, encoder_attention_heads=20, encoder_ffn_dim=5120, d_model=1280
    )
    thinker["audio_config"]["output_dim"] = 3584
    thinker["vision_config"].update(
        depth=32,
        hidden_size=1280,
        intermediate_size=3420,
        num_heads=16,
        out_hidden_size=3584,
        window_size=112,
        fullatt_block_indexes=[7, 15, 23, 31],
    )
    thinker["text_config"].update(
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        max_position_embeddings=32768,
        rope_parameters=rope,
    )
    raw["talker_config"].update(
        vocab_size=8448,
        tts_codec_start_token_id=8293,
        tts_codec_end_token_id=8294,
        tts_codec_pad_token_id=8292,
        tts_codec_mask_token_id=8296,
        embedding_size=3584,
        hidden_size=896,
        intermediate_size=18944,
        num_hidden_layers=24,
        num_attention_heads=12,
        num_key_value_heads=4,
        head_dim=128,
        max_position_embeddings=32768,
        rope_parameters=rope,
    )
    dit = raw["token2wav_config"]["dit_config"]
    dit.update(
        hidden_size=1024,
        num_hidden_layers=22,
        num_attention_heads=16,
        head_dim=64,
        emb_dim=512,
        look_ahead_layers=[10],
        look_backward_layers=[0, 20],
        num_embeds=8193,
        enc_emb_dim=192,
        enc_dim=128,
        enc_channels=[256, 256, 256, 256, 768],
        enc_attention_channels=64,
        enc_res2net_scale=2,
        enc_se_channels=64,
        max_position_embeddings=32768,
    )
    raw["token2wav_config"]["bigvgan_config"].update(
        upsample_initial_channel=1536,
        resblock_kernel_sizes=[3, 7, 11],
        resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5], [1, 3, 5]],
        upsample_rates=[5, 3, 2, 2, 2, 2],
        upsample_kernel_sizes=[11, 7, 4, 4, 4, 4],
    )
    return raw


def _few_layers(raw: dict[str, Any], layers: int) -> None:
    """Every stack cut to ``layers`` (a CPU check of the real-width path)."""
    thinker = raw["thinker_config"]
    thinker["audio_config"]["encoder_layers"] = layers
    thinker["vision_config"].update(depth=layers, fullatt_block_indexes=[layers - 1])
    thinker["text_config"]["num_hidden_layers"] = layers
    raw["talker_config"]["num_hidden_layers"] = layers
    dit = raw["token2wav_config"]["dit_config"]
    dit.update(num_hidden_layers=layers, look_ahead_layers=[0], look_backward_layers=[0])


def build(
    folder: Path, tiny: bool, device: str, layers: int | None = None
) -> tuple[Any, Any, dict[str, Any]]:
    """(model on ``device``, processor, generation config) — weights initialised in place."""
    import torch
    from transformers import Qwen2_5OmniConfig, Qwen2_5OmniForConditionalGeneration

    from omni_qwen.omni.qwen25_loading import load_processor
    from omni_qwen.testing import qwen25_omni as tiny_mod

    if tiny:
        tiny_mod.build_tiny_qwen25_omni(folder)
        model = Qwen2_5OmniForConditionalGeneration.from_pretrained(folder).to(device).eval()
    else:
        folder.mkdir(parents=True, exist_ok=True)
        ids = tiny_mod.write_tokenizer(folder)
        tiny_mod.write_processor(folder)
        raw = real_config(tiny_mod.tiny_config(ids, max(ids.values()) + 1))
        if layers:
            _few_layers(raw, layers)
        (folder / "config.json").write_text(json.dumps(raw, indent=2))
        speakers = {
            name: {
                "cond": torch.randn(192),
                "ref_mel": torch.randn(300, 80) * 0.5 - 5.0,
                "bos_token": ids[f"<|spk_{name.lower()}|>"],
            }
            for name in tiny_mod.SPEAKERS
        }
        torch.save(speakers, folder / "spk_dict.pt")
        dtype = torch.bfloat16 if device != "cpu" else torch.float32
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            with torch.device(device):
                model = Qwen2_5OmniForConditionalGeneration(Qwen2_5OmniConfig(**raw))
        finally:
            torch.set_default_dtype(previous)
        model.token2wav.float()
        model.load_speakers(str(folder / "spk_dict.pt"))
        model.eval()
    processor, _ = load_processor(folder)
    return model, processor, {"eos_token_id": [-1], "do_sample": False}


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "mean": statistics.fmean(ordered),
        "p50": ordered[len(ordered) // 2],
        "max": ordered[-1],
    }


def run_omni(
    pipeline: Any,
    concurrency: int,
    tokens: int,
    sync: Any,
    streamed: bool = True,
    audio: bool = True,
) -> dict[str, Any]:
    """One level: ``concurrency`` answers opened at once; ``streamed``: speech in chunks as a
    streaming client gets it (False: the whole answer's speech decoded in one piece);
    ``audio`` False: text-only answers (no first audio, no RTF)."""
    from omni_core import GenerationRequest
    from omni_core.chat import ChatMessage

    runtime = pipeline.shared_runtime()
    requests = [
        pipeline.validate(
            GenerationRequest(
                messages=[ChatMessage.text("user", PROMPT.format(i))],
                modalities=("text", "audio") if audio else ("text",),
                max_tokens=tokens,
                temperature=0,
                seed=0,
                stream=streamed,
            )
        )
        for i in range(concurrency)
    ]
    sync()
    t0 = time.perf_counter()
    streams = [pipeline.open(r) for r in requests]
    first_text: dict[int, float] = {}
    first_audio: dict[int, float] = {}
    text_end: dict[int, float] = {}
    end: dict[int, float] = {}
    done_ids: dict[int, list[int]] = {}
    audio_s = [0.0] * concurrency
    completion = [0] * concurrency
    steps0 = runtime.steps
    while not all(s.done for s in streams):
        runtime.step()
        now = time.perf_counter()
        for i, stream in enumerate(streams):
            # token ids, not text: random weights mostly make ids the small tokenizer lacks
            if stream.ids and i not in first_text:
                first_text[i] = now
            if stream.ids and len(stream.ids) > len(done_ids.get(i, ())):
                done_ids[i], text_end[i] = list(stream.ids), now
            for delta in stream.poll():
                if delta.audio is not None:
                    first_audio.setdefault(i, now)
                    audio_s[i] += len(delta.audio.samples) / delta.audio.sample_rate
                if delta.usage is not None:
                    completion[i] = delta.usage.completion_tokens
                    end[i] = now
    for stream in streams:
        if stream.error is not None:
            raise stream.error
    wall = time.perf_counter() - t0
    per_request = [
        completion[i] / max(text_end[i] - t0, 1e-9) for i in range(concurrency) if i in text_end
    ]
    spoken = (
        {
            "ttfa_s": _stats([first_audio[i] - t0 for i in first_audio]),
            "audio_s_per_request": statistics.fmean(audio_s),
            "rtf": _stats([(end[i] - t0) / max(audio_s[i], 1e-9) for i in range(concurrency)]),
        }
        if audio
        else {}
    )
    return {
        "concurrency": concurrency,
        "audio": audio,
        "completion_tokens": statistics.fmean(completion),
        "ttft_s": _stats([first_text[i] - t0 for i in first_text]),
        **spoken,
        "tokens_per_s_per_request": statistics.fmean(per_request),
        "tokens_per_s_total": sum(completion) / wall,
        "wall_s": wall,
        "thinker_steps": runtime.steps - steps0,
        "streamed": streamed,
    }


def answer_audio(pipeline: Any, tokens: int) -> tuple[list[int], Any]:
    """One streamed greedy answer's text ids and audio (numpy), to compare two decode paths."""
    import numpy as np

    from omni_core import GenerationRequest
    from omni_core.chat import ChatMessage

    request = pipeline.validate(
        GenerationRequest(
            messages=[ChatMessage.text("user", PROMPT.format(0))],
            modalities=("text", "audio"),
            max_tokens=tokens,
            temperature=0,
            seed=0,
            stream=True,
        )
    )
    stream = pipeline.open(request)
    runtime = pipeline.shared_runtime()
    pieces = []
    while not stream.done:
        runtime.step()
        pieces += [d.audio.samples for d in stream.poll() if d.audio is not None]
    pieces += [d.audio.samples for d in stream.poll() if d.audio is not None]
    return list(stream.ids), np.concatenate(pieces)


def token2wav_parts(codec: Any) -> list[tuple[Any, str, str]]:
    """Qwen2.5-Omni's codec chunk in parts: the DiT's ODE + BigVGAN per speaker batch, and
    BigVGAN alone (what is left of ``codec_chunk`` is its host read and the per-row cut)."""
    return [
        (codec, "_waveforms", "codec_ode_and_vocoder"),
        (codec.token2wav.code2wav_bigvgan_model, "forward", "codec_vocoder"),
    ]


def profile_omni(
    pipeline: Any, concurrency: int, tokens: int, sync: Any, codec_parts: Any = None
) -> dict[str, Any]:
    """Per-stage time of one level (an untimed pass: every stage call is wrapped in device
    synchronisations, so its wall time is its own; host work is the rest of the step).
    ``codec_parts(codec)``: (owner, method, name) of the family's codec internals to time too
    (nested in ``codec_chunk``)."""
    runtime = pipeline.shared_runtime()
    timer = StageTimer(sync)
    spent, calls = timer.spent, timer.calls
    timer.wrap(runtime.stages.decoder, "prefill", "thinker_prefill")
    timer.wrap(runtime.stages.decoder, "decode", "thinker_step")
    nested = ["step"]
    if runtime.speech_chain is not None:
        speech = runtime.speech_chain.stages
        timer.wrap(speech.decoder, "prefill", "talker_prefill")
        timer.wrap(speech.decoder, "decode", "talker_step")
        for i, stage in enumerate(speech.frame_stages):
            timer.wrap(stage, "run", f"frame_stage_{i}")
        timer.wrap(speech.codec, "decode", "codec_chunk")
        for owner, method, name in codec_parts(speech.codec) if codec_parts else []:
            timer.wrap(owner, method, name)
            nested.append(name)
    timer.wrap(runtime, "step", "step")
    try:
        level = run_omni(pipeline, concurrency, tokens, sync)
    finally:
        timer.restore()
    steps = max(calls.get("step", 1), 1)
    stages = {
        k: {"calls": calls[k], "ms_per_call": v * 1e3 / calls[k], "ms_per_step": v * 1e3 / steps}
        for k, v in spent.items()
        if k != "step"
    }
    host = spent.get("step", 0.0) - sum(v for k, v in spent.items() if k not in nested)
    stages["host_work"] = {"ms_per_step": host * 1e3 / steps}
    summary = ", ".join(f"{k} {v['ms_per_step']:.1f}" for k, v in stages.items())
    print(f"profile c={concurrency}: {steps} steps, ms/step: {summary}", flush=True)
    return {"concurrency": concurrency, "steps": steps, "stages": stages, "wall_s": level["wall_s"]}


def kernel_trace(
    pipeline: Any, concurrency: int, tokens: int, sync: Any, audio: bool = True, top: int = 30
) -> dict[str, Any]:
    """One level under ``torch.profiler`` (CPU and CUDA; kernels replayed inside CUDA graphs
    are recorded too): the ``top`` operators and kernels by device time, with the level's wall
    time and runtime steps, so a step's device time can be told from its host time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    runtime = pipeline.shared_runtime()
    steps0 = runtime.steps
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        level = run_omni(pipeline, concurrency, tokens, sync, audio=audio)
        sync()
    events = prof.key_averages()
    rows = sorted(events, key=lambda e: e.device_time_total, reverse=True)[:top]
    table = [
        {"name": e.key[:120], "calls": e.count, "device_ms": e.device_time_total / 1e3,
         "cpu_ms": e.cpu_time_total / 1e3}
        for e in rows
    ]  # fmt: skip
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    device_ms = sum(e.self_device_time_total for e in events) / 1e3
    out = {"concurrency": concurrency, "audio": audio, "steps": runtime.steps - steps0,
           "wall_s": level["wall_s"], "device_ms": device_ms, "kernels": len(kernels),
           "top": table}  # fmt: skip
    print(
        f"trace c={concurrency} audio={audio}: {out['steps']} steps, wall {level['wall_s']:.3f} s,"
        f" device {device_ms:.1f} ms",
        flush=True,
    )
    for row in table[:20]:
        print(f"  {row['device_ms']:9.2f} ms {row['calls']:6d}x  {row['name']}", flush=True)
    return out


def run_transformers(
    model: Any, processor: Any, concurrency: int, tokens: int, frames: int, sync: Any
) -> dict[str, Any]:
    import torch

    texts = [
        processor.apply_chat_template(
            [{"role": "user", "content": [{"type": "text", "text": PROMPT.format(i)}]}],
            add_generation_prompt=True,
            tokenize=False,
        )
        for i in range(concurrency)
    ]
    batch = processor(text=texts, return_tensors="pt", padding=True).to(model.device)
    # the codes token2wav has no embedding for are banned, as omni's talker stage bans them (a
    # random talker says them; token2wav would index past its table)
    talker = model.talker
    first_bad = model.config.token2wav_config.dit_config.num_embeds + 1
    stops = {talker.codec_pad_token, talker.codec_eos_token}
    bad = [[i] for i in range(first_bad, talker.codebook_size) if i not in stops]
    sync()
    t0 = time.perf_counter()
    with torch.inference_mode():
        sequences, wavs = model.generate(
            **batch,
            speaker="Chelsie",
            thinker_max_new_tokens=tokens,
            thinker_min_new_tokens=tokens,
            thinker_do_sample=False,
            talker_do_sample=False,
            talker_max_new_tokens=frames,
            talker_min_new_tokens=frames,
            **({"talker_bad_words_ids": bad} if bad else {}),
        )
    sync()
    wall = time.perf_counter() - t0
    wavs = wavs if isinstance(wavs, list) else [wavs]
    audio = [w.numel() / 24000 for w in wavs]
    made = (sequences.shape[1] - batch["input_ids"].shape[1]) * concurrency
    return {
        "what": "Qwen2_5OmniForConditionalGeneration.generate, the prompts batched, thinker and "
        "talker greedy; it streams nothing: first token and first audio come at the end",
        "concurrency": concurrency,
        "wall_s": wall,
        "ttft_s": wall,
        "ttfa_s": wall,
        "tokens_per_s_total": made / wall,
        "audio_s_per_request": statistics.fmean(audio),
        "rtf": wall / max(statistics.fmean(audio), 1e-9),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="the tiny checkpoint (CPU test)")
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--talker-frames", type=int, default=100)
    parser.add_argument("--chunk-frames", type=int, default=25)
    parser.add_argument("--first-chunk-frames", type=int, default=10)
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--profile", default="", help="levels to profile per stage, e.g. 1,8")
    parser.add_argument("--layers", type=int, help="cut every stack (CPU check of the 7B path)")
    parser.add_argument(
        "--option", action="append", default=[], help="a load option KEY=VALUE (decode_graphs=on)"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    _paths()
    import torch

    from omni_core import PipelineOptions
    from omni_core.contract.platforms import current_platform
    from omni_qwen.omni.qwen25_pipeline import Qwen25OmniPipeline

    cuda = torch.cuda.is_available() and not args.cpu
    device = "cuda" if cuda else "cpu"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    levels = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        model, processor, generation = build(Path(tmp) / "model", args.tiny, device, args.layers)
        sync()
        init_s = time.perf_counter() - t0
        params = sum(p.numel() for p in model.parameters())
        print(f"init {init_s:.1f} s, {params / 1e9:.2f} B parameters on {device}", flush=True)
        options = PipelineOptions(
            device=torch.device(device),
            dtype=torch.bfloat16 if cuda else torch.float32,
            platform=current_platform(),
            extra={
                "talker_max_frames": args.talker_frames,
                "talker_sample": "off",
                "audio_chunk_frames": args.chunk_frames,
                "audio_first_chunk_frames": args.first_chunk_frames,
                **dict(o.split("=", 1) for o in args.option),
            },
        )

        def make(graphs: str) -> Any:
            # "off": every decode path eager (the DiT's and, with --option decode_graphs=...,
            # the thinker's and talker's steps)
            extra = options.extra | {"cuda_graphs": graphs}
            if graphs == "off":
                extra["decode_graphs"] = "off"
            made = Qwen25OmniPipeline(
                model, processor, False, replace(options, extra=extra), generation
            )
            made.max_concurrency = max(levels)
            # The same work on both sides: random weights end a greedy talker at chaotic
            # points (a bf16 near-tie decides), so neither side may stop early: exactly
            # --talker-frames codes per answer (transformers gets talker_min_new_tokens).
            talker = made.shared_runtime().speech_chain
            if talker is not None:
                talker.stages.decoder.stop_ids = talker.stages.decoder.stop_ids[:0]
            return made

        pipeline = make("on")
        # warm-up at the measured lengths, streamed and not: first uses (graph captures of
        # the chunk shapes, kernel autotuning) are not what a running server pays
        run_omni(pipeline, 1, args.max_tokens, sync)
        run_omni(pipeline, 1, args.max_tokens, sync, streamed=False)
        omni_levels, reference = [], []
        for concurrency in levels:
            level = run_omni(pipeline, concurrency, args.max_tokens, sync)
            omni_levels.append(level)
            print(
                f"omni c={concurrency}: ttft {level['ttft_s']['mean'] * 1e3:.0f} ms, ttfa "
                f"{level['ttfa_s']['mean'] * 1e3:.0f} ms, "
                f"{level['tokens_per_s_per_request']:.1f} tok/s/request, "
                f"{level['tokens_per_s_total']:.1f} tok/s, rtf {level['rtf']['mean']:.3f}, "
                f"audio {level['audio_s_per_request']:.2f} s/request",
                flush=True,
            )
        whole = []  # the same levels, not streamed: speech decoded once per answer
        for concurrency in levels:
            whole.append(run_omni(pipeline, concurrency, args.max_tokens, sync, streamed=False))
            print(
                f"omni c={concurrency} not streamed: wall {whole[-1]['wall_s']:.2f} s, rtf "
                f"{whole[-1]['rtf']['mean']:.3f}",
                flush=True,
            )
        eager = make("off")
        run_omni(eager, 1, args.max_tokens, sync)  # warm-up
        eager_level = run_omni(eager, 1, args.max_tokens, sync)
        graphs_report = pipeline.shared_runtime().speech_chain.stages.codec.graphs.report()
        runtime = pipeline.shared_runtime()
        stages = {"thinker": runtime.stages.decoder, "talker": runtime.speech_chain.stages.decoder}
        (ids, audio), (eager_ids, eager_audio) = (
            answer_audio(pipeline, args.max_tokens),
            answer_audio(eager, args.max_tokens),
        )
        size = min(len(audio), len(eager_audio))
        graphs = {
            "dit_graphs": graphs_report,
            "decode_steps": {
                name: stage.report() if hasattr(stage, "report") else {"path": "eager"}
                for name, stage in stages.items()
            },
            "eager_c1": eager_level,
            "text_ids_equal_eager": ids == eager_ids,
            "audio_samples": [len(audio), len(eager_audio)],
            "max_abs_diff_vs_eager": float(abs(audio[:size] - eager_audio[:size]).max()),
        }
        print(f"decode steps: {graphs['decode_steps']}; ids equal: {ids == eager_ids}", flush=True)
        print(
            f"omni c=1 eager DiT: ttfa {eager_level['ttfa_s']['mean'] * 1e3:.0f} ms, rtf "
            f"{eager_level['rtf']['mean']:.3f}; graphs vs eager audio max |diff| "
            f"{graphs['max_abs_diff_vs_eager']:.2e}",
            flush=True,
        )
        del eager
        profiles = [
            profile_omni(pipeline, int(c), args.max_tokens, sync, token2wav_parts)
            for c in args.profile.split(",")
            if c.strip()
        ]
        if not args.no_reference:
            run_transformers(model, processor, 1, 4, 8, sync)  # warm-up
            for concurrency in levels:
                ref = run_transformers(
                    model, processor, concurrency, args.max_tokens, args.talker_frames, sync
                )
                reference.append(ref)
                print(
                    f"transformers c={concurrency}: wall {ref['wall_s']:.2f} s (= ttft = ttfa), "
                    f"{ref['tokens_per_s_total']:.1f} tok/s, rtf {ref['rtf']:.3f}",
                    flush=True,
                )
        peak = torch.cuda.max_memory_allocated() if cuda else None
    result = {
        "model": "tiny" if args.tiny else "Qwen2.5-Omni-7B sizes, random weights",
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "parameters": params,
        "init_s": init_s,
        "peak_gpu_bytes": peak,
        "settings": vars(args) | {"out": str(args.out)},
        "omni": omni_levels,
        "omni_not_streamed": whole,
        "cuda_graphs": graphs,
        "profile": profiles,
        "transformers": reference,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
