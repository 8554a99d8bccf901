"""What omni's LoRA and VAE-tiling helpers need to know about Wan: how diffusers reads its LoRA
files (the community Wan formats converted), and its VAE's tiling arguments."""

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


def tile_kwargs(tile: int) -> dict[str, int]:
    """``enable_tiling`` arguments of Wan's VAE for square tiles overlapping by 1/4."""
    stride = tile * 3 // 4
    return {
        "tile_sample_min_height": tile,
        "tile_sample_min_width": tile,
        "tile_sample_stride_height": stride,
        "tile_sample_stride_width": stride,
    }
