"""Qwen3-Omni on omni's chat runtime vs transformers' ``generate`` in the same run.

    source bench/gpu_env.sh
    python3 bench/omni3_chat_bench.py --out $OUT/omni3-chat-h200.json    # ~4-6 min on one H200
    python3 bench/omni3_chat_bench.py --tiny --concurrency 1,2 --out /tmp/omni3-chat-tiny.json

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
to first token and first audio: it streams nothing), tokens/s, RTF.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from omni_chat_bench import PROMPT, _paths, run_omni


def _moe(hidden: int, layers: int, heads: int, kv: int, experts_mlp: int, **extra: Any) -> dict:
    return {
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": 128,
        "moe_intermediate_size": experts_mlp,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "max_position_embeddings": 65536,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 1000000.0,
            "mrope_section": [24, 20, 20],
            "interleaved": True,
            "mrope_interleaved": True,
        },
        **extra,
    }


def real_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The tiny config with the Qwen3-Omni-30B-A3B sizes (token ids stay the tiny tokenizer's;
    the codec ids are the real ones)."""
    thinker = raw["thinker_config"]
    thinker["audio_config"].update(
        encoder_layers=32,
        encoder_attention_heads=20,
        encoder_ffn_dim=5120,
        d_model=1280,
        output_dim=2048,
        downsample_hidden_size=480,
    )
    thinker["vision_config"].update(
        depth=27,
        hidden_size=1152,
        intermediate_size=4304,
        num_heads=16,
        out_hidden_size=2048,
        num_position_embeddings=2304,
        deepstack_visual_indexes=[8, 16, 24],
    )
    thinker["text_config"].update(
        _moe(2048, 48, 32, 4, 768, vocab_size=152064, intermediate_size=768, norm_topk_prob=True)
    )
    talker = raw["talker_config"]
    talker["text_config"].update(
        _moe(
            1024,
            20,
            16,
            2,
            384,
            vocab_size=3072,
            intermediate_size=2048,
            shared_expert_intermediate_size=768,
            norm_topk_prob=False,
        )
    )
    talker["code_predictor_config"].update(
        vocab_size=2048,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=5,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=65536,
        num_code_groups=16,
    )
    talker.update(
        num_code_groups=16,
        thinker_hidden_size=2048,
        accept_hidden_layer=24,
        codec_pad_id=2148,
        codec_bos_id=2149,
        codec_eos_token_id=2150,
        codec_nothink_id=2155,
        codec_think_bos_id=2156,
        codec_think_eos_id=2157,
        speaker_id={"chelsie": 2301, "ethan": 2302, "aiden": 2303},
    )
    raw["code2wav_config"].update(
        codebook_size=2048,
        hidden_size=1024,
        num_attention_heads=16,
        num_key_value_heads=16,
        intermediate_size=3072,
        num_hidden_layers=8,
        num_quantizers=16,
        decoder_dim=1536,
    )
    return raw


def build(folder: Path, tiny: bool, device: str) -> tuple[Any, Any]:
    """(model on ``device``, processor) — weights initialised in place."""
    import torch
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration

    from omni_qwen.omni import qwen3_tiny as tiny_mod
    from omni_qwen.omni.qwen3_prompt import load_processor

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
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            with torch.device(device):
                model = Qwen3OmniMoeForConditionalGeneration(Qwen3OmniMoeConfig(**raw))
        finally:
            torch.set_default_dtype(previous)
        model.eval()
    processor, _ = load_processor(folder)
    return model.requires_grad_(False), processor


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
    sync()
    t0 = time.perf_counter()
    with torch.inference_mode():
        sequences, wavs = model.generate(
            **batch,
            speaker="ethan",
            thinker_max_new_tokens=tokens,
            thinker_min_new_tokens=tokens,
            thinker_do_sample=False,
            talker_do_sample=False,
            talker_max_new_tokens=frames + 1,
        )
    sync()
    wall = time.perf_counter() - t0
    wavs = wavs if isinstance(wavs, list) else [wavs]
    audio = [w.numel() / 24000 for w in wavs]
    made = (sequences.shape[1] - batch["input_ids"].shape[1]) * concurrency
    return {
        "what": "Qwen3OmniMoeForConditionalGeneration.generate, the prompts batched, thinker "
        "and talker greedy; it streams nothing: first token and first audio come at the end",
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
    parser.add_argument("--talker-frames", type=int, default=50)
    parser.add_argument("--chunk-frames", type=int, default=12)
    parser.add_argument("--left-context", type=int, default=25)
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    _paths()
    import torch

    from omni_core import PipelineOptions
    from omni_core.platforms import current_platform
    from omni_qwen.omni.qwen3_pipeline import Qwen3OmniPipeline

    cuda = torch.cuda.is_available() and not args.cpu
    device = "cuda" if cuda else "cpu"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    levels = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        folder = Path(tmp) / "model"
        model, processor = build(folder, args.tiny, device)
        sync()
        init_s = time.perf_counter() - t0
        params = sum(p.numel() for p in model.parameters())
        print(f"init {init_s:.1f} s, {params / 1e9:.2f} B parameters on {device}", flush=True)
        options = PipelineOptions(
            device=torch.device(device),
            dtype=torch.bfloat16 if cuda else torch.float32,
            platform=current_platform(),
            extra={
                "max_audio_frames": args.talker_frames,
                "chunk_frames": args.chunk_frames,
                "left_context": args.left_context,
            },
        )
        pipeline = Qwen3OmniPipeline(model, processor, False, options, folder)
        pipeline.max_concurrency = max(levels)
        run_omni(pipeline, 1, 4, sync)  # warm-up
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
        "model": "tiny" if args.tiny else "Qwen3-Omni-30B-A3B sizes, random weights",
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "parameters": params,
        "init_s": init_s,
        "peak_gpu_bytes": peak,
        "settings": vars(args) | {"out": str(args.out)},
        "omni": omni_levels,
        "transformers": reference,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
