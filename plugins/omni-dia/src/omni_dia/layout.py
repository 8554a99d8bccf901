"""Where a Dia checkpoint keeps its parts: the model folder, and the DAC codec that
``processor_config.json`` names (``descript/dac_44khz`` on the Hub, or a folder inside the
checkpoint, as :func:`omni_dia.testing.build_tiny_dia` writes it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The codec's folder inside a checkpoint folder (a relative ``audio_tokenizer_name_or_path``).
DAC_FOLDER = "dac"


def load_processor(path: Path | str) -> Any:
    """transformers' ``DiaProcessor`` of a checkpoint folder, its DAC from the folder the
    processor config names (relative to the checkpoint, or a Hub id)."""
    from transformers import DacModel, DiaFeatureExtractor, DiaProcessor, DiaTokenizer

    path = Path(path)
    named = DAC_FOLDER
    config = path / "processor_config.json"
    if config.is_file():
        data = json.loads(config.read_text())
        named = data.get("audio_tokenizer", {}).get("audio_tokenizer_name_or_path", named)
    local = path / named
    dac = DacModel.from_pretrained(local if local.is_dir() else named).eval()
    return DiaProcessor(
        DiaFeatureExtractor.from_pretrained(path), DiaTokenizer.from_pretrained(path), dac
    )
