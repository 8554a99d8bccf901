"""Where a Pocket TTS checkpoint keeps its parts: the model folder, the codec that
``processor_config.json`` names (a Hub id, or a folder inside the checkpoint, as
:func:`omni_pocket_tts.testing.build_tiny_pocket_tts` writes it) and the built-in voices of its
``voices/`` folder (one ``<name>.safetensors`` of voice-prompt latents each)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The codec's folder inside a checkpoint folder (a relative ``audio_tokenizer_name_or_path``).
CODEC_FOLDER = "audio_tokenizer"
#: The built-in voices: ``voices/<name>.safetensors``, one ``[frames, latent_dim]`` tensor of
#: the codec's latents each (what ``generate()`` reads as ``audio_prompt_latents``).
VOICES_FOLDER = "voices"


def codec_name(path: Path) -> str | None:
    """The codec the processor names (``processor_config.json``'s ``audio_tokenizer`` entry,
    else ``audio_tokenizer_config.json``); None: the checkpoint names none."""
    for name, nested in (("processor_config.json", True), ("audio_tokenizer_config.json", False)):
        config = path / name
        if config.is_file():
            data = json.loads(config.read_text())
            entry = data.get("audio_tokenizer") if nested else data
            if isinstance(entry, dict) and entry.get("audio_tokenizer_name_or_path"):
                return str(entry["audio_tokenizer_name_or_path"])
    return None


def load_processor(path: Path | str) -> Any:
    """transformers' ``PocketTTSProcessor`` of a checkpoint folder with its codec, from the
    folder or Hub id the processor names (a relative folder: inside the checkpoint; none: the
    checkpoint folder itself)."""
    from transformers import (
        AutoTokenizer,
        PocketTTSAudioTokenizerModel,
        PocketTTSFeatureExtractor,
        PocketTTSProcessor,
    )

    path = Path(path)
    named = codec_name(path)
    local = path / named if named else path
    source = local if local.is_dir() else named
    codec = PocketTTSAudioTokenizerModel.from_pretrained(source, use_safetensors=True).eval()
    config = json.loads((path / "processor_config.json").read_text())
    settings = {
        key: config[key]
        for key in (
            "short_text_max_words",
            "frames_after_eos_short_text",
            "frames_after_eos",
            "fade_in_duration",
        )
        if key in config
    }
    template = path / "chat_template.jinja"
    return PocketTTSProcessor(
        PocketTTSFeatureExtractor.from_pretrained(path),
        AutoTokenizer.from_pretrained(path),
        codec,
        chat_template=template.read_text() if template.is_file() else None,
        **settings,
    )


def builtin_voices(path: Path | str) -> dict[str, Path]:
    """The checkpoint's built-in voices: name -> its latents file (sorted by name)."""
    folder = Path(path) / VOICES_FOLDER
    if not folder.is_dir():
        return {}
    return {p.stem: p for p in sorted(folder.glob("*.safetensors"))}


def load_voice(file: Path) -> Any:
    """A built-in voice's ``[frames, latent_dim]`` float32 latents (the file's one tensor)."""
    from safetensors.torch import load_file

    tensors = list(load_file(str(file)).values())
    if len(tensors) != 1:
        raise ValueError(f"{file}: a voice file holds one tensor of latents, not {len(tensors)}")
    latents = tensors[0].float()
    return latents.reshape(-1, latents.shape[-1])
