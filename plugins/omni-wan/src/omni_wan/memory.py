"""What omni's LoRA adapters need to know about Wan: how diffusers reads its LoRA files (the
community Wan formats converted)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def read_lora(path: Path) -> tuple[dict[str, Any], Any]:
    """A LoRA file as diffusers' Wan pipelines read it (one file may hold both experts:
    ``transformer.`` keys for the high-noise one, ``transformer_2.`` for the low-noise one)."""
    from diffusers import WanPipeline

    return WanPipeline.lora_state_dict(
        str(path.parent), weight_name=path.name, return_lora_metadata=True
    )
