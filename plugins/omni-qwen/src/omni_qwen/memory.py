"""What omni's LoRA adapters need to know about Qwen-Image: how diffusers reads its LoRA files."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def read_lora(path: Path) -> tuple[dict[str, Any], Any]:
    """A LoRA file as diffusers' Qwen-Image pipelines read it (community formats converted)."""
    from diffusers import QwenImagePipeline as Reference

    return Reference.lora_state_dict(
        str(path.parent), weight_name=path.name, return_lora_metadata=True
    )
