"""What omni's LoRA adapters need to know about FLUX: how diffusers reads its LoRA files."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def read_lora(path: Path) -> tuple[dict[str, Any], Any]:
    """A LoRA file as diffusers' FLUX.1 pipelines read it (Kohya, XLabs, BFL control and the
    other community formats converted to diffusers' names)."""
    from diffusers import FluxPipeline as Reference

    return Reference.lora_state_dict(
        str(path.parent), weight_name=path.name, return_lora_metadata=True
    )
