"""omni's half of the Qwen3-TTS oracle (run by oracle_qwen3_tts.py in a subprocess, transformers 5).

``python oracle_qwen3_tts_omni_side.py OUT_DIR``: builds the tiny checkpoints (official layout)
under OUT_DIR/<kind>, runs ``reference_generate`` on every case of ``CASES`` and writes
OUT_DIR/omni.npz (codes, waveforms, clone prompts, a fixed-codes decode) for the other half,
which loads the same folders with the official qwen-tts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

MAX_NEW_TOKENS = 24
PENALTY = 1.05
CV, VD, BASE = "custom_voice", "voice_design", "base"
CASES = [  # name, kind, request, non_streaming
    ("cv_plain", CV, {"text": "hello world", "speaker": "aiden", "language": "english"}, True),
    (
        "cv_instruct_stream",
        CV,
        {"text": "hi user", "speaker": "serena", "instructions": "whisper"},
        False,
    ),
    (
        "cv_dialect_auto",
        CV,
        {"text": "world hello", "speaker": "uncle_fu", "language": "auto"},
        True,
    ),
    ("vd_design", VD, {"text": "hello world", "language": "german", "instructions": "calm"}, True),
    ("vd_stream", VD, {"text": "hello", "language": "auto", "instructions": "bright"}, False),
    ("base_icl", BASE, {"text": "hello world", "language": "english", "ref_text": "hello"}, False),
    ("base_icl_nonstream", BASE, {"text": "world", "ref_text": "hello user"}, True),
    (
        "base_xvec",
        BASE,
        {"text": "hello world", "language": "english", "x_vector_only": True},
        False,
    ),
]


def reference_audio(sr: int = 24000, seconds: float = 1.3) -> np.ndarray:
    """A deterministic voiced-ish test signal: two partials with vibrato plus a little noise."""
    t = np.arange(int(sr * seconds)) / sr
    rng = np.random.default_rng(7)
    wav = 0.4 * np.sin(2 * np.pi * (180 + 8 * np.sin(2 * np.pi * 5 * t)) * t) + 0.2 * np.sin(
        2 * np.pi * 470 * t
    )
    return (wav * np.hanning(t.size) + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


def main(out: Path) -> None:
    from omni_qwen.testing import build_tiny_qwen3_tts
    from omni_qwen.tts import Qwen3TTSModel, reference_generate

    torch.set_num_threads(1)
    results: dict[str, np.ndarray] = {}
    models = {}
    for kind in ("custom_voice", "voice_design", "base"):
        build_tiny_qwen3_tts(out / kind, kind)
        models[kind] = Qwen3TTSModel.from_pretrained(out / kind)
    ref = reference_audio()
    results["ref_audio"] = ref
    for name, kind, request, non_streaming in CASES:
        model = models[kind]
        request = dict(request)
        voice = None
        if kind == "base":
            voice = model.prepare_voice(
                ref,
                24000,
                ref_text=request.pop("ref_text", None),
                x_vector_only=request.pop("x_vector_only", False),
            )
            results[f"{name}.spk"] = voice.speaker_embedding.numpy()
            if voice.ref_codes is not None:
                results[f"{name}.ref_codes"] = voice.ref_codes.numpy()
        output = reference_generate(
            model,
            voice=voice,
            non_streaming=non_streaming,
            max_new_tokens=MAX_NEW_TOKENS,
            repetition_penalty=PENALTY,
            **request,
        )
        results[f"{name}.codes"] = output.codes.numpy()
        results[f"{name}.wav"] = output.wav
    fixed = torch.randint(0, 64, (16, 330), generator=torch.Generator().manual_seed(3))
    results["fixed_codes"] = fixed.numpy()
    with torch.inference_mode():
        results["fixed_wav"] = models["custom_voice"].codec.decode(fixed).numpy()
    np.savez(out / "omni.npz", **results)
    (out / "cases.json").write_text(
        json.dumps({"cases": CASES, "max_new_tokens": MAX_NEW_TOKENS, "penalty": PENALTY})
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
