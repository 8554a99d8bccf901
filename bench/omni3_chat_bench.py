"""Qwen3-Omni on omni's chat runtime vs transformers' ``generate`` in the same run.

    source bench/gpu_env.sh
    python3 bench/omni3_chat_bench.py --out $OUT/omni3-chat-h200.json    # ~4-6 min on one H200
    python3 bench/omni3_chat_bench.py --tiny --concurrency 1,2 --out /tmp/omni3-chat-tiny.json
    python3 bench/omni3_chat_bench.py --no-reference --variant decode_graphs=off --out ...  # A/B

The model is ``Qwen3OmniMoeForConditionalGeneration`` at the Qwen3-Omni-30B-A3B sizes (MoE
thinker 2048 x 48 layers, 128 experts / 8 active, with its vision and audio towers; MoE talker
1024 x 20 with its 5-layer code predictor over 16 codebooks; code2wav 1024 x 8 + the 1536-wide
decoder) with random weights initialised directly on the GPU in bf16 (~35 B parameters, ~70 GB):
no checkpoint is written. The tokenizer and processor files are the tiny checkpoint's (token ids
only need to be in range). omni's side is the real serving path below the HTTP layer:
``Qwen3OmniPipeline`` and its ``ChatRuntime``, N requests opened at once and the runtime
stepped as the engine steps it (:func:`omni_chat_bench.run_omni`, shared with the Qwen2.5-Omni
bench). Every request asks for text + audio, greedy, ``--max-tokens`` text tokens and at most
``--talker-frames`` frames (random weights rarely stop); code2wav streams chunks of
``--chunk-frames`` frames with ``--left-context`` frames of context.

Reported per concurrency: time to first text token, time to first audio, decode tokens/s per
request and in all, audio seconds made and RTF (request wall time / its audio seconds); for
transformers (``generate`` with the same prompts batched, talker greedy): wall time (= its time
to first token and first audio: it streams nothing), tokens/s, RTF. ``--option KEY=VALUE``
passes a load option to omni's pipeline (``decode_graphs=on|static|off``: the decode steps as
CUDA graphs or eager); each ``--variant KEY=VALUE[,...]`` runs omni's side once more on the same
model with those options on top. ``variants`` in the result holds every run with its stage
paths (graph counters where graphed) and its greedy answer compared with the first run's.
``--profile 1,8`` times each stage of those levels (synchronised), ``--trace 1,1t`` records
their kernels with ``torch.profiler`` (``1t``: a text-only answer). Every level runs once
untimed first (its shapes' first kernels, a bucket's capture);
``--text-concurrency 1,32`` adds text-only answers of ``--text-tokens`` tokens (``text_only``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from omni_chat_bench import PROMPT, _paths, answer_audio, kernel_trace, profile_omni, run_omni

#: The Qwen3-Omni-30B-A3B sizes that differ from the tiny checkpoint's, per sub-config.
SIZES: dict[str, dict[str, Any]] = {
    "audio": {
        "encoder_layers": 32,
        "encoder_attention_heads": 20,
        "encoder_ffn_dim": 5120,
        "d_model": 1280,
        "output_dim": 2048,
        "downsample_hidden_size": 480,
    },
    "vision": {
        "depth": 27,
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_heads": 16,
        "out_hidden_size": 2048,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [8, 16, 24],
    },
    "code_predictor": {
        "vocab_size": 2048,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 5,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "num_code_groups": 16,
    },
    "talker": {
        "num_code_groups": 16,
        "thinker_hidden_size": 2048,
        "accept_hidden_layer": 24,
        "codec_pad_id": 2148,
        "codec_bos_id": 2149,
        "codec_eos_token_id": 2150,
        "codec_nothink_id": 2155,
        "codec_think_bos_id": 2156,
        "codec_think_eos_id": 2157,
        "speaker_id": {"chelsie": 2301, "ethan": 2302, "aiden": 2303},
    },
    "code2wav": {
        "codebook_size": 2048,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "intermediate_size": 3072,
        "num_hidden_layers": 8,
        "num_quantizers": 16,
        "decoder_dim": 1536,
    },
}


def real_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The tiny config with the Qwen3-Omni-30B-A3B sizes (token ids stay the tiny tokenizer's;
    the codec ids are the real ones)."""
    from omni_qwen.testing.qwen3_omni import moe_text

    wide = {"heads": 32, "kv_heads": 4, "head_dim": 128, "experts": 128, "active": 8}
    thinker, talker = raw["thinker_config"], raw["talker_config"]
    thinker["audio_config"].update(SIZES["audio"])
    thinker["vision_config"].update(SIZES["vision"])
    thinker["text_config"] = moe_text(
        152064, 2048, 48, **wide, expert_size=768, mrope=(24, 20, 20), norm_topk_prob=True,
        intermediate_size=768, max_position_embeddings=65536,
    )  # fmt: skip
    talker["text_config"] = moe_text(
        3072, 1024, 20, **{**wide, "heads": 16, "kv_heads": 2}, expert_size=384,
        mrope=(24, 20, 20), norm_topk_prob=False, shared_expert_intermediate_size=768,
        max_position_embeddings=65536,
    )  # fmt: skip
    talker["code_predictor_config"].update(SIZES["code_predictor"])
    talker.update(SIZES["talker"])
    raw["code2wav_config"].update(SIZES["code2wav"])
    return raw


def build(folder: Path, tiny: bool, device: str) -> tuple[Any, Any]:
    """(model on ``device``, processor) — weights initialised in place."""
    import torch
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration

    from omni_qwen.omni.qwen3_prompt import load_processor
    from omni_qwen.testing import qwen3_omni as tiny_mod

    if tiny:
        tiny_mod.build_tiny_qwen3_omni(folder)
        model = Qwen3OmniMoeForConditionalGeneration.from_pretrained(folder).to(device).eval()
    else:
        folder.mkdir(parents=True, exist_ok=True)
        tokens = tiny_mod.write_tokenizer(folder)
        tiny_mod.write_processor(folder)
        raw = real_config(tiny_mod.tiny_config(tokens))
        (folder / "config.json").write_text(json.dumps(raw, indent=2))
        dtype = torch.bfloat16 if device != "cpu" else torch.float32
        with torch.device(device):  # initialised where it runs, in its dtype
            model = Qwen3OmniMoeForConditionalGeneration._from_config(
                Qwen3OmniMoeConfig(**raw), dtype=dtype
            ).eval()
    processor, _ = load_processor(folder)
    return model.requires_grad_(False), processor


def run_transformers(
    model: Any, processor: Any, concurrency: int, tokens: int, frames: int, sync: Any
) -> dict[str, Any]:
    """``generate`` on the same prompts, batched (thinker and talker greedy, ``frames`` frames
    at most: one talker token more, as its last code never gets residuals)."""
    import torch

    from omni_core.chat import ChatMessage
    from omni_qwen.omni.qwen3_prompt import encode

    rows = [
        encode(processor, [ChatMessage.text("user", PROMPT.format(i))], videos=False)
        for i in range(concurrency)
    ]
    width = max(r["input_ids"].shape[1] for r in rows)
    pad = processor.tokenizer.pad_token_id
    ids = torch.full((concurrency, width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):  # left padding, as the processor pads
        length = row["input_ids"].shape[1]
        ids[i, width - length :], mask[i, width - length :] = row["input_ids"][0], 1
    sync()
    started = time.perf_counter()
    with torch.inference_mode():
        sequences, wavs = model.generate(
            input_ids=ids.to(model.device),
            attention_mask=mask.to(model.device),
            speaker="ethan",
            thinker_max_new_tokens=tokens,
            thinker_min_new_tokens=tokens,
            thinker_do_sample=False,
            talker_do_sample=False,
            talker_max_new_tokens=frames + 1,
        )
    sync()
    wall = time.perf_counter() - started
    seconds = [w.numel() / 24000 for w in (wavs if isinstance(wavs, list) else [wavs])]
    mean_audio = sum(seconds) / len(seconds)
    return {
        "what": "Qwen3OmniMoeForConditionalGeneration.generate on the prompts batched, greedy; "
        "it streams nothing, so its first token and first audio come with the whole answer",
        "concurrency": concurrency,
        "wall_s": wall,
        "ttft_s": wall,
        "ttfa_s": wall,
        "tokens_per_s_total": (sequences.shape[1] - width) * concurrency / wall,
        "audio_s_per_request": mean_audio,
        "rtf": wall / max(mean_audio, 1e-9),
    }


def _line(side: str, level: dict[str, Any]) -> str:
    """One printed line: the figures of a level, means where there are several."""

    def value(key: str) -> float:
        raw = level[key]
        return float(raw["mean"] if isinstance(raw, dict) else raw)

    keys = ("ttft_s", "ttfa_s", "tokens_per_s_total", "rtf", "audio_s_per_request", "wall_s")
    shown = ", ".join(f"{k} {value(k):.3f}" for k in keys if k in level)
    return f"{side} c={level['concurrency']}: {shown}"


def _options(items: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings (comma-separated within one) as load options."""
    options: dict[str, str] = {}
    for item in items:
        for part in filter(None, (p.strip() for p in item.split(","))):
            key, _, value = part.partition("=")
            options[key.strip()] = value.strip()
    return options


def _stage_reports(pipeline: Any) -> dict[str, Any]:
    """Which path each decode stage ran (graphed stages report path and graph counters)."""
    runtime = pipeline.shared_runtime()
    chain = runtime.speech_chain.stages
    stages = {
        "thinker": runtime.stages.decoder,
        "talker": chain.decoder,
        "code_predictor": chain.frame_stages[0],
    }
    return {
        name: {"stage": type(stage).__name__}
        | (stage.report() if hasattr(stage, "report") else {"path": "eager"})
        for name, stage in stages.items()
    }


def run_variant(
    make: Any, options: dict[str, str], levels: list[int], args: Any, sync: Any
) -> dict[str, Any]:
    """omni's side under one set of load options: warm-up, every level, the stage paths and
    one greedy answer's text ids and audio (to compare the variants' outputs)."""
    pipeline = make(options)
    out: dict[str, Any] = {"options": options, "omni": [], "text_only": []}
    text_levels = [int(c) for c in args.text_concurrency.split(",") if c.strip()]
    try:  # a variant that fails is recorded, the others' figures are kept
        for concurrency in levels:  # warm-up: every level's shapes run once before timing
            run_omni(pipeline, concurrency, 4, sync)
        for concurrency in levels:
            out["omni"].append(run_omni(pipeline, concurrency, args.max_tokens, sync))
            print(_line(f"omni {options}", out["omni"][-1]), flush=True)
        for concurrency in text_levels:
            run_omni(pipeline, concurrency, 4, sync, audio=False)  # warm-up
            level = run_omni(pipeline, concurrency, args.text_tokens, sync, audio=False)
            out["text_only"].append(level)
            print(_line(f"omni text-only {options}", level), flush=True)
        out["profile"] = [
            profile_omni(pipeline, int(c), args.max_tokens, sync)
            for c in args.profile.split(",")
            if c.strip()
        ]
        out["trace"] = [
            kernel_trace(pipeline, int(c.rstrip("t")), args.max_tokens, sync, not c.endswith("t"))
            for c in args.trace.split(",")
            if c.strip()
        ]
        out["answer"] = answer_audio(pipeline, args.max_tokens)
    except Exception as exc:  # noqa: BLE001 - reported in the results file
        out["error"] = f"{type(exc).__name__}: {exc}"
        print(f"omni {options} failed: {out['error']}", flush=True)
    out["stages"] = _stage_reports(pipeline)
    print(f"stages {options}: {out['stages']}", flush=True)
    return out


def _compare(variants: list[dict[str, Any]]) -> None:
    """Each variant's greedy answer against the first's: same text ids, audio max |diff|."""
    if not variants or "answer" not in variants[0]:
        return
    ids, audio = variants[0]["answer"]
    for variant in variants:
        if "answer" not in variant:
            continue
        other_ids, other_audio = variant.pop("answer")
        size = min(len(audio), len(other_audio))
        variant["vs_first"] = {
            "text_ids_equal": other_ids == ids,
            "audio_samples": [len(other_audio), len(audio)],
            "max_abs_diff": float(abs(other_audio[:size] - audio[:size]).max()) if size else None,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag in ("--tiny", "--cpu", "--no-reference"):
        parser.add_argument(flag, action="store_true")
    numbers = {
        "--max-tokens": 24,
        "--talker-frames": 50,
        "--chunk-frames": 12,
        "--left-context": 25,
    }
    for flag, default in numbers.items():
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument("--concurrency", default="1,8", help="levels, comma-separated")
    parser.add_argument(
        "--text-concurrency", default="", help="text-only answer levels (e.g. 1,32); none: skip"
    )
    parser.add_argument("--text-tokens", type=int, default=128, help="tokens per text answer")
    parser.add_argument("--profile", default="", help="levels to profile per stage, e.g. 1,8")
    parser.add_argument(
        "--trace", default="", help="levels to trace kernels of (torch.profiler), 1t: text-only"
    )
    parser.add_argument("--option", action="append", default=[], help="KEY=VALUE load option")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help="KEY=VALUE[,KEY=VALUE] load options of one more omni run on the same model "
        "(repeatable; the first run uses --option alone)",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    _paths()
    import gc

    import torch

    from omni_core import PipelineOptions
    from omni_core.contract.platforms import current_platform
    from omni_qwen.omni.qwen3_pipeline import Qwen3OmniPipeline

    cuda = torch.cuda.is_available() and not args.cpu
    device = "cuda" if cuda else "cpu"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    levels = [int(c) for c in args.concurrency.split(",")]
    result: dict[str, Any] = {"settings": vars(args) | {"out": str(args.out)}}
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        folder = Path(tmp) / "model"
        model, processor = build(folder, args.tiny, device)
        sync()
        result["init_s"] = time.perf_counter() - started
        result["parameters"] = sum(p.numel() for p in model.parameters())
        print(f"init {result['init_s']:.1f} s, {result['parameters'] / 1e9:.2f} B parameters")
        base = {
            "max_audio_frames": args.talker_frames,
            "chunk_frames": args.chunk_frames,
            "left_context": args.left_context,
        } | _options(args.option)
        dtype = torch.bfloat16 if cuda else torch.float32

        def make(options: dict[str, str]) -> Any:
            extra = {**base, **options}
            pipeline_options = PipelineOptions(
                device=torch.device(device), dtype=dtype, platform=current_platform(), extra=extra
            )
            pipeline = Qwen3OmniPipeline(model, processor, False, pipeline_options, folder)
            pipeline.max_concurrency = max(levels)
            return pipeline

        variants: list[dict[str, Any]] = []
        result["variants"] = variants
        for items in [[], *([v] for v in args.variant)]:
            variants.append(run_variant(make, _options(items), levels, args, sync))
            gc.collect()  # the variant's pipeline (its caches and graph pools) goes
            if cuda:
                torch.cuda.empty_cache()
            _write(args.out, result)  # what is measured survives a run cut short
        _compare(variants)
        first = variants[0]
        result["omni"] = first["omni"]
        result["profile"] = first.get("profile", [])
        result["code_predictor"] = first["stages"]["code_predictor"]
        if not args.no_reference:
            result["transformers"] = []

            def reference(concurrency: int, tokens: int) -> dict[str, Any]:
                return run_transformers(
                    model, processor, concurrency, tokens, args.talker_frames, sync
                )

            try:  # a failing reference is recorded, omni's figures are kept
                reference(1, 4)  # warm-up
                for concurrency in levels:
                    result["transformers"].append(reference(concurrency, args.max_tokens))
                    print(_line("transformers", result["transformers"][-1]), flush=True)
            except Exception as exc:  # noqa: BLE001 - reported in the results file
                result["transformers_error"] = f"{type(exc).__name__}: {exc}"
                print(f"transformers failed: {result['transformers_error']}", flush=True)
        result["peak_gpu_bytes"] = torch.cuda.max_memory_allocated() if cuda else None
    result["model"] = "tiny" if args.tiny else "Qwen3-Omni-30B-A3B sizes, random weights"
    result["device"] = torch.cuda.get_device_name(0) if cuda else "cpu"
    _write(args.out, result)
    print(f"wrote {args.out}", flush=True)


def _write(path: Path, result: dict[str, Any]) -> None:
    """The result so far (answers kept for the comparison are not written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shown = {
        **result,
        "variants": [
            {k: v for k, v in variant.items() if k != "answer"}
            for variant in result.get("variants", [])
        ],
    }
    path.write_text(json.dumps(shown, indent=2))


if __name__ == "__main__":
    main()
