"""Issue 26's measurement: Qwen2.5-Omni / Qwen3-Omni spoken answers through a real ``omni serve``
with the official ``openai`` client, and the same answers in-process, at 1, 2, 8 and 32.

    bash bench/omni_chat_http.sh                                   # on the GPU machine
    bash bench/omni_chat_http.sh --model qwen3-omni-30b-a3b --option decode_graphs=on
    python3 bench/omni_chat_http_bench.py --tiny --concurrency 1,2 --text-concurrency 1 \\
        --rounds 1 --out /tmp/omni-chat-tiny.json                      # CPU smoke run

A checkpoint folder in the official layout is written once under ``--checkpoint`` (reused while
complete): the model at the real sizes (``omni_chat_bench.real_config`` /
``omni3_chat_bench.real_config``) with random weights initialised on the GPU in bf16 as those
in-process benches do (transformers' own init; saved with ``save_pretrained``: ~21 GB for
Qwen2.5-Omni-7B, ~70 GB for Qwen3-Omni-30B-A3B, more than one H200 machine's disk: use the
two-GPU kind for its disk, or ``--spill /dev/shm/omni-spill``: a shard that would leave the
checkpoint's disk with less than 4 GB free is written there instead and linked into the folder
under its own name, so the folder keeps the official layout and loads as it is), the tiny
checkpoint's tokenizer with its vocabulary padded to the thinker's (every id a random thinker
says decodes to a word, so the client sees every token), its processor files, and
``generation_config.json`` with no stop token (every answer has exactly ``--max-tokens``
tokens). Speech is capped at ``--speech-frames`` codes per answer
(``talker_max_frames`` / ``max_audio_frames``); a random talker may still end an answer
earlier, so each row reports the seconds of audio it got.

Then ``omni bench serve --task chat --checkpoint DIR --start-server`` runs (the command is in
the result; the server and the in-process engine run with ``--batch-seeded``: every bench
answer is seeded, and a user's unseeded answers share token2wav calls by default, which is what
this measures), and its report is added to ``--out``'s ``runs``; ``rows`` holds the latest row of
every model, path, mode and level over the runs (so levels may be measured in separate runs),
``targets`` each target of the issue against them. A run's report holds the rows of the
issue's schema (``model``, ``concurrency``, ``path``, ``first_audio_s``, ``rtf``,
``text_tokens_per_s``, ...), the command, GPU and versions, and its own ``targets`` and
``note`` (which are missed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
#: Served id -> (family, load option that caps speech codes per answer).
MODELS = {
    "qwen2.5-omni-7b": ("qwen25", "talker_max_frames"),
    "qwen3-omni-30b-a3b": ("qwen3", "max_audio_frames"),
}
#: Issue 26's targets: (path, mode, level, key, bound, "max"|"min").
TARGETS: dict[str, list[tuple[str, str, int, str, float, str]]] = {
    "qwen2.5-omni-7b": [
        ("http", "audio", 1, "rtf", 0.20, "max"),
        ("http", "audio", 8, "rtf", 0.40, "max"),
        ("http", "audio", 32, "rtf", 0.60, "max"),
        ("http", "audio", 1, "first_audio_s", 0.250, "max"),
        ("http", "audio", 8, "first_audio_s", 0.500, "max"),
        ("http", "text", 1, "text_tokens_per_s", 150.0, "min"),
        ("http", "text", 32, "text_tokens_per_s_total", 800.0, "min"),
    ],
    "qwen3-omni-30b-a3b": [
        ("http", "audio", 1, "rtf", 0.25, "max"),
        ("http", "audio", 8, "rtf", 0.40, "max"),
        ("http", "audio", 32, "rtf", 0.60, "max"),
        ("http", "audio", 1, "first_audio_s", 0.300, "max"),
        ("http", "audio", 8, "first_audio_s", 0.600, "max"),
        ("http", "text", 1, "text_tokens_per_s", 120.0, "min"),
    ],
}


def pad_vocabulary(folder: Path, size: int) -> None:
    """Fill the tokenizer's vocabulary (``vocab.json``, and ``tokenizer.json``'s where there is
    one) up to ``size`` ids with lowercase words (byte-level symbols that are themselves: each
    decodes to its letters) in the ids not taken; the special tokens are written in too, at
    their ids (a vocabulary with gaps makes the tokenizer renumber them)."""
    config = json.loads((folder / "tokenizer_config.json").read_text("utf-8"))
    specials = {t["content"]: int(i) for i, t in config.get("added_tokens_decoder", {}).items()}
    vocab_file, fast_file = folder / "vocab.json", folder / "tokenizer.json"
    fast = json.loads(fast_file.read_text("utf-8")) if fast_file.exists() else None
    if fast is not None:
        specials.update({t["content"]: int(t["id"]) for t in fast.get("added_tokens", [])})
        fast["model"]["vocab"] = _filled(fast["model"]["vocab"], specials, size)
        fast_file.write_text(json.dumps(fast, ensure_ascii=False), encoding="utf-8")
    vocab = json.loads(vocab_file.read_text("utf-8"))
    vocab_file.write_text(
        json.dumps(_filled(vocab, specials, size), ensure_ascii=False), encoding="utf-8"
    )


def _filled(vocab: dict[str, int], specials: dict[str, int], size: int) -> dict[str, int]:
    vocab = {**vocab, **{k: v for k, v in specials.items() if k not in vocab}}
    taken = set(vocab.values())
    letters = "abcdefghijklmnopqrstuvwxyz"
    n = 0
    for i in range(size):
        if i in taken:
            continue
        while True:
            word, k = "", n
            while True:
                word, k = letters[k % 26] + word, k // 26
                if not k:
                    break
            n += 1
            if "\u0120" + word not in vocab:
                break
        vocab["\u0120" + word] = i  # "Ġword": " word"
    return vocab


def build_checkpoint(
    model: str, folder: Path, frames: int, tiny: bool, spill: Path | None = None
) -> Path:
    """The folder for ``model`` (module doc); a complete one (``.complete``) is reused."""
    if (folder / ".complete").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    family = MODELS[model][0]
    if tiny:
        from omni_qwen import testing

        getattr(testing, f"build_tiny_{family}_omni")(folder)
        generation = json.loads((folder / "generation_config.json").read_text())
    else:
        generation = _real(family, folder, frames, spill)
    generation.update(eos_token_id=[-1], do_sample=False)  # exactly --max-tokens tokens
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2))
    (folder / ".complete").write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    return folder


@contextlib.contextmanager
def spilled_shards(spill: Path | None, reserve: int = 4 << 30) -> Iterator[None]:
    """While saving, a shard that would leave its disk with under ``reserve`` bytes free goes to
    ``spill`` (a tmpfs on the GPU machine) and is linked into the folder under its own name."""
    if spill is None:
        yield
        return
    import transformers.modeling_utils as saving

    write = saving.safe_save_file

    def placed(tensors: dict[str, Any], filename: str, metadata: Any = None) -> None:
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        target = Path(filename)
        if shutil.disk_usage(target.parent).free - size < reserve:
            spill.mkdir(parents=True, exist_ok=True)
            if shutil.disk_usage(spill).free - size < reserve:
                gb = size / 1e9
                raise SystemExit(f"no room for {target.name} ({gb:.1f} GB) here or in {spill}")
            write(tensors, str(spill / target.name), metadata=metadata)
            target.unlink(missing_ok=True)
            target.symlink_to(spill / target.name)
            print(f"{target.name}: {size / 1e9:.1f} GB in {spill}", flush=True)
        else:
            write(tensors, filename, metadata=metadata)

    saving.safe_save_file = placed
    try:
        yield
    finally:
        saving.safe_save_file = write


def _real(family: str, folder: Path, frames: int, spill: Path | None) -> dict[str, Any]:
    """Random weights at the real sizes, initialised on the GPU in bf16 as the in-process
    benches initialise them (transformers' own init), saved with ``save_pretrained``."""
    import gc

    import torch

    sys.path.insert(0, str(ROOT))
    if family == "qwen25":
        from omni_chat_bench import real_config
        from transformers import Qwen2_5OmniConfig, Qwen2_5OmniForConditionalGeneration

        from omni_qwen.omni.qwen25_loading import quiet_default_talker_config
        from omni_qwen.testing import qwen25_omni as tiny

        quiet_default_talker_config()
        ids = tiny.write_tokenizer(folder)
        raw = real_config(tiny.tiny_config(ids, max(ids.values()) + 1))
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            with torch.device("cuda"):
                model = Qwen2_5OmniForConditionalGeneration(Qwen2_5OmniConfig(**raw))
        finally:
            torch.set_default_dtype(previous)
    else:
        from omni3_chat_bench import real_config
        from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration

        from omni_qwen.testing import qwen3_omni as tiny

        ids = tiny.write_tokenizer(folder)
        raw = real_config(tiny.tiny_config(ids))
        with torch.device("cuda"):
            model = Qwen3OmniMoeForConditionalGeneration._from_config(
                Qwen3OmniMoeConfig(**raw), dtype=torch.bfloat16
            )
    tiny.write_processor(folder)
    pad_vocabulary(folder, int(raw["thinker_config"]["text_config"]["vocab_size"]))
    count = sum(p.numel() for p in model.parameters())
    with spilled_shards(spill):
        model.save_pretrained(str(folder), safe_serialization=True, max_shard_size="10GB")
    del model
    gc.collect()
    torch.cuda.empty_cache()
    print(f"wrote {count / 1e9:.2f} B parameters to {folder}", flush=True)
    (folder / "config.json").write_text(json.dumps(raw, indent=2))  # the official layout
    if family == "qwen25":  # the speakers token2wav conditions on
        generator = torch.Generator().manual_seed(0)
        speakers = {
            name: {
                "cond": torch.randn(192, generator=generator),
                "ref_mel": torch.randn(300, 80, generator=generator) * 0.5 - 5.0,
                "bos_token": ids[f"<|spk_{name.lower()}|>"],
            }
            for name in tiny.SPEAKERS
        }
        torch.save(speakers, folder / "spk_dict.pt")
        return {"talker_max_new_tokens": frames}
    return {}


def check_targets(model: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by = {(r["path"], r["mode"], r["concurrency"]): r for r in rows}
    out = []
    for path, mode, level, key, bound, kind in TARGETS.get(model, []):
        value = by.get((path, mode, level), {}).get(key)
        met = None if value is None else (value <= bound if kind == "max" else value >= bound)
        out.append(
            {"path": path, "mode": mode, "concurrency": level, "key": key,
             "target": f"{'<=' if kind == 'max' else '>='} {bound}", "value": value, "met": met}
        )  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="qwen2.5-omni-7b")
    parser.add_argument("--checkpoint", type=Path, default=Path("/tmp/omni-chat-ckpt"))
    parser.add_argument("--tiny", action="store_true", help="the tiny checkpoint (CPU run)")
    parser.add_argument("--spill", type=Path, help="shards that do not fit the disk go here")
    parser.add_argument("--build-only", action="store_true", help="write the checkpoint, stop")
    parser.add_argument(
        "--http-only", action="store_true", help="no in-process rows (one load of the model)"
    )
    parser.add_argument("--concurrency", default="1,2,8,32")
    parser.add_argument("--text-concurrency", default="1,32")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--speech-frames", type=int, default=100, help="codes per answer at most")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--option", action="append", default=[], help="KEY=VALUE load option")
    parser.add_argument("--serve-arg", action="append", default=[])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    folder = args.checkpoint / (args.model + ("-tiny" if args.tiny else ""))
    t0 = time.perf_counter()
    build_checkpoint(args.model, folder, args.speech_frames, args.tiny, args.spill)
    build_s = time.perf_counter() - t0
    if args.build_only:
        print(f"checkpoint {folder} ready in {build_s:.1f} s", flush=True)
        return
    cap = MODELS[args.model][1]
    options = [f"{cap}={args.speech_frames}", *args.option]
    raw_out = args.out.with_suffix(".bench.json")
    argv = [
        "bench", "serve", "--task", "chat", "--model", args.model, "--checkpoint", str(folder),
        "--start-server", "--concurrency", args.concurrency,
        "--text-concurrency", args.text_concurrency, "--max-tokens", str(args.max_tokens),
        "--rounds", str(args.rounds), "--output", str(raw_out),
        *(["--no-in-process"] if args.http_only else []),
        *(a for o in options for a in ("--option", o)),
        *(f"--serve-arg={a}" for a in ["--batch-seeded", *args.serve_arg]),
    ]  # fmt: skip
    command = "omni " + " ".join(argv)
    env = {**os.environ, "OMNI_BENCH_COMMAND": command}
    cmd = [sys.executable, "-c", "from omni_core.cli import main; main()", *argv]
    done = subprocess.run(cmd, env=env, check=False)
    if not raw_out.exists():
        raise SystemExit(f"omni bench serve wrote nothing (exit {done.returncode})")
    result = json.loads(raw_out.read_text())
    gpu = None
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except ImportError:
        pass
    targets = check_targets(args.model, result["rows"])
    missed = [t for t in targets if t["met"] is False]
    unmeasured = [f"{t['key']} at {t['concurrency']}" for t in targets if t["met"] is None]
    note = "; ".join(
        f"{t['key']} at {t['concurrency']} ({t['path']} {t['mode']}) = {t['value']} "
        f"(target {t['target']})"
        for t in missed
    )
    note = ("missed: " + note) if missed else "every measured target met"
    if unmeasured:
        note += "; not measured in this run: " + ", ".join(unmeasured)
    report = {
        "issue": 26,
        "model": args.model,
        "tiny": args.tiny,
        "command": command,
        "script": "bash bench/omni_chat_http.sh " + " ".join(sys.argv[1:]),
        "gpu": gpu,
        "versions": result["versions"],
        "checkpoint_build_s": build_s,
        "rows": [{**r, "model": args.model} for r in result["rows"]],
        "comparisons": result["comparisons"],
        "peak_device_memory_bytes": result["peak_device_memory_bytes"],
        "targets": targets,
        "note": note,
        "bench_result": raw_out.name,
    }
    merged: dict[str, Any] = {"runs": [], "rows": []}
    if args.out.exists():  # earlier runs stay (the other model, other levels): one table
        merged = json.loads(args.out.read_text())
    merged["runs"].append(report)
    key = ("model", "path", "mode", "concurrency")
    fresh = {tuple(r[k] for k in key) for r in report["rows"]}
    kept = [r for r in merged["rows"] if tuple(r[k] for k in key) not in fresh]
    merged["rows"] = kept + report["rows"]
    merged["targets"] = [
        {"model": m, **t} for m in sorted({r["model"] for r in merged["rows"]})
        for t in check_targets(m, [r for r in merged["rows"] if r["model"] == m])
    ]  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(merged, indent=2))
    print(f"wrote {args.out}: {report['note']}", flush=True)
    if done.returncode:
        raise SystemExit(done.returncode)


if __name__ == "__main__":
    main()
