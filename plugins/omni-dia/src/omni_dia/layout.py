"""Where a Dia checkpoint keeps its parts: the model folder, and the DAC codec that
``processor_config.json`` names (``descript/dac_44khz`` on the Hub, or a folder inside the
checkpoint, as :func:`omni_dia.testing.build_tiny_dia` writes it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The codec's folder inside a checkpoint folder (a relative ``audio_tokenizer_name_or_path``).
DAC_FOLDER = "dac"
#: The codec of the published checkpoints (DiaProcessor's own default).
DAC_HUB = "descript/dac_44khz"


def codec_name(path: Path) -> str:
    """The DAC the processor names: ``processor_config.json``'s ``audio_tokenizer`` entry, else
    ``audio_tokenizer_config.json`` (the two places transformers' processors keep it), else
    :data:`DAC_HUB`."""
    for name, nested in (("processor_config.json", True), ("audio_tokenizer_config.json", False)):
        config = path / name
        if config.is_file():
            data = json.loads(config.read_text())
            entry = data.get("audio_tokenizer") if nested else data
            if isinstance(entry, dict) and entry.get("audio_tokenizer_name_or_path"):
                return str(entry["audio_tokenizer_name_or_path"])
    return DAC_HUB


def load_processor(path: Path | str) -> Any:
    """transformers' ``DiaProcessor`` of a checkpoint folder, its DAC from the folder or Hub
    id the processor names (a relative folder: inside the checkpoint)."""
    from transformers import DacModel, DiaFeatureExtractor, DiaProcessor, DiaTokenizer

    path = Path(path)
    named = codec_name(path)
    local = path / named
    source = local if local.is_dir() else named
    dac = DacModel.from_pretrained(source, use_safetensors=True).eval()
    extractor = DiaFeatureExtractor.from_pretrained(path)
    return DiaProcessor(extractor, DiaTokenizer.from_pretrained(path), dac)
