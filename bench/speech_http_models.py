"""The speech models ``bench/qwen3_tts_http_bench.py`` serves: how each one's checkpoint is made
(random weights at the real size in the official layout, or the tiny test checkpoint) and what a
request asks so that it makes exactly N frames (random weights never say when to stop).

    Qwen3-TTS (omni-qwen): ``min_new_tokens`` holds the end token back; 12.5 frames a second.
    VibeVoice (omni-vibevoice): ``omni_vibevoice.bench.build_random_vibevoice`` writes a model
    whose every step is speech, so ``max_new_tokens`` frames are made; 7.5 frames a second.
    Dia (omni-dia): ``omni_dia.bench.build_random_dia``; random weights never end a clip, so
    ``max_new_tokens`` positions make ``max_new_tokens - 16`` frames; 44100 / 512 a second.
    Pocket TTS (omni-pocket-tts): ``omni_pocket_tts.bench.build_random_pocket_tts``; an
    ``eos_threshold`` out of reach makes exactly ``max_new_tokens`` frames; 12.5 a second.
"""

from __future__ import annotations

import io
import json
import sys
import wave
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class BenchModel:
    """One served id: its family's plugin, the checkpoint builder, the voice and frame fields."""

    plugin: str  # the omni plugin package (versions, a bare checkout's src path)
    build: Callable[[Path, bool, str], Path]  # (folder, tiny, device) -> the checkpoint
    voice: str | None  # a built-in voice; None: clones the voice uploaded at start-up
    frame_fields: Callable[[int], dict[str, Any]]  # request extras for exactly N frames
    frame_s: float  # seconds of audio per frame


def _on_path(plugin: str) -> None:
    """A bare checkout: the core's and the plugin's sources (installed packages win)."""
    module = plugin.replace("-", "_")
    try:
        __import__(module)
    except ImportError:
        for src in ("core/src", f"plugins/{plugin}/src"):
            sys.path.insert(0, str(ROOT / src))


# -- Qwen3-TTS --------------------------------------------------------------------------------

#: ECAPA-TDNN of the published Base checkpoints (enc_dim = the talker's width).
SPEAKER_ENCODER = {
    "mel_dim": 128,
    "enc_channels": [512, 512, 512, 512, 1536],
    "enc_kernel_sizes": [5, 3, 3, 3, 1],
    "enc_dilations": [1, 2, 3, 4, 1],
    "enc_attention_channels": 128,
    "enc_res2net_scale": 8,
    "enc_se_channels": 128,
    "sample_rate": 24000,
}


def _random_state(module: Any, prefix: str, dtype: Any, generator: Any, device: str) -> dict:
    import torch

    state = {}
    for key, tensor in module.state_dict().items():
        if not tensor.is_floating_point():
            value = tensor.to("cpu")
        elif any(s in key for s in ("norm", "scale", "usage", "gamma", "alpha", "beta")):
            value = (
                torch.ones(tensor.shape, dtype=dtype) if tensor.is_meta else tensor.to("cpu", dtype)
            )
        else:
            value = (
                torch.randn(tensor.shape, generator=generator, device=device, dtype=dtype)
                .mul_(0.02)
                .to("cpu")
            )
        state[prefix + key] = value.contiguous()
    return state


def qwen3_tts_checkpoint(folder: Path, size: str, kind: str, device: str) -> Path:
    """Random weights at the real size in the official layout (what ``qwen3_tts_bench`` writes
    for CustomVoice; Base: no named speakers, plus the speaker encoder)."""
    import torch
    from qwen3_tts_bench import _real_configs
    from safetensors.torch import save_file

    from omni_qwen.testing.qwen3_tts import GENERATION, write_tokenizer
    from omni_qwen.tts.config import Qwen3TTSConfig, SpeechTokenizerConfig
    from omni_qwen.tts.speaker import SpeakerEncoder
    from omni_qwen.tts.speech_tokenizer import SpeechTokenizer, to_official_keys
    from omni_qwen.tts.talker import Talker

    (folder / "speech_tokenizer").mkdir(parents=True, exist_ok=True)
    raw, raw_speech = _real_configs(size, write_tokenizer(folder))
    if kind == "base":
        raw["tts_model_type"] = "base"
        raw["talker_config"].update(spk_id={}, spk_is_dialect={})
        width = raw["talker_config"]["hidden_size"]
        raw["speaker_encoder_config"] = {**SPEAKER_ENCODER, "enc_dim": width}
    generator = torch.Generator(device).manual_seed(0)
    config = Qwen3TTSConfig.from_dict(raw)
    with torch.device("meta"):
        talker = Talker(config.talker)
    state = _random_state(talker, "talker.", torch.bfloat16, generator, device)
    if kind == "base":
        speaker = SpeakerEncoder(config.speaker_encoder)
        state.update(_random_state(speaker, "speaker_encoder.", torch.bfloat16, generator, device))
    save_file(state, str(folder / "model.safetensors"))
    del state, talker
    codec = SpeechTokenizer(SpeechTokenizerConfig.from_dict(raw_speech))
    codec_state = to_official_keys(_random_state(codec, "", torch.float32, generator, device))
    save_file(codec_state, str(folder / "speech_tokenizer" / "model.safetensors"))
    del codec, codec_state
    (folder / "config.json").write_text(json.dumps(raw, indent=2))
    (folder / "generation_config.json").write_text(json.dumps(GENERATION, indent=2))
    (folder / "speech_tokenizer" / "config.json").write_text(json.dumps(raw_speech, indent=2))
    return folder


def _qwen3_tts(size: str, kind: str) -> Callable[[Path, bool, str], Path]:
    def build(folder: Path, tiny: bool, device: str) -> Path:
        if tiny:
            from omni_qwen.testing import build_tiny_qwen3_tts

            return build_tiny_qwen3_tts(folder, kind, "0b6" if size == "0.6b" else "1b7")
        return qwen3_tts_checkpoint(folder, size, kind, device)

    return build


def _qwen3_frames(frames: int) -> dict[str, Any]:
    return {"min_new_tokens": frames, "max_new_tokens": frames + 1}


# -- VibeVoice --------------------------------------------------------------------------------


def _vibevoice(size: str) -> Callable[[Path, bool, str], Path]:
    def build(folder: Path, tiny: bool, device: str) -> Path:
        from omni_vibevoice.bench import build_random_vibevoice

        return build_random_vibevoice(folder, size="tiny" if tiny else size, device=device)

    return build


def _vibevoice_frames(frames: int) -> dict[str, Any]:
    return {"max_new_tokens": frames}  # every step of the random model is a frame


# -- Dia --------------------------------------------------------------------------------------


def _dia(folder: Path, tiny: bool, device: str) -> Path:
    from omni_dia.bench import build_random_dia

    return build_random_dia(folder, size="tiny" if tiny else "1.6b", device=device)


def _dia_frames(frames: int) -> dict[str, Any]:
    return {"max_new_tokens": frames + 16}  # the first 15 positions fill the delayed codebooks


# -- Pocket TTS -------------------------------------------------------------------------------


def _pocket_tts(folder: Path, tiny: bool, device: str) -> Path:
    from omni_pocket_tts.bench import build_random_pocket_tts

    return build_random_pocket_tts(folder, size="tiny" if tiny else "100m", device=device)


def _pocket_tts_frames(frames: int) -> dict[str, Any]:
    return {"max_new_tokens": frames, "eos_threshold": 100.0}  # no random logit ends a clip


#: Served id -> what it is.
MODELS: dict[str, BenchModel] = {
    "qwen3-tts-1.7b-customvoice": BenchModel(
        "omni-qwen", _qwen3_tts("1.7b", "custom_voice"), "aiden", _qwen3_frames, 0.08
    ),
    "qwen3-tts-0.6b-customvoice": BenchModel(
        "omni-qwen", _qwen3_tts("0.6b", "custom_voice"), "aiden", _qwen3_frames, 0.08
    ),
    "qwen3-tts-1.7b-base": BenchModel(
        "omni-qwen", _qwen3_tts("1.7b", "base"), None, _qwen3_frames, 0.08
    ),
    "vibevoice-1.5b": BenchModel(
        "omni-vibevoice", _vibevoice("1.5b"), "speaker_0", _vibevoice_frames, 1 / 7.5
    ),
    "vibevoice-7b": BenchModel(
        "omni-vibevoice", _vibevoice("7b"), "speaker_0", _vibevoice_frames, 1 / 7.5
    ),
    "dia-1.6b": BenchModel("omni-dia", _dia, "default", _dia_frames, 512 / 44100),
    "pocket-tts": BenchModel("omni-pocket-tts", _pocket_tts, "alba", _pocket_tts_frames, 0.08),
}


def checkpoint_for(model: str, tiny: bool, root: Path, device: str) -> Path:
    """The model's checkpoint under ``root`` (reused when it is there already)."""
    folder = root / model
    if (folder / "config.json").exists():
        return folder
    _on_path(MODELS[model].plugin)
    return MODELS[model].build(folder, tiny, device)


def reference_wav(seconds: float = 3.0, rate: int = 24000) -> bytes:
    """The voice a cloning model clones: a steady two-tone "speaker" (random weights care for no
    more)."""
    import numpy as np

    t = np.arange(int(seconds * rate)) / rate
    tone = 0.3 * np.sin(2 * np.pi * 180 * t) + 0.1 * np.sin(2 * np.pi * 530 * t)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(rate)
        handle.writeframes((tone * 32767).astype("<i2").tobytes())
    return buf.getvalue()


REFERENCE_TEXT = "A steady tone that stands for the speaker."
#: The name the cloned voice is uploaded under.
UPLOADED = "bench-voice"


def voice_of(model: str) -> str:
    """The voice a request of ``model`` speaks in: its built-in one, or the uploaded one."""
    return MODELS[model].voice or UPLOADED
