"""Check a diffusion plugin's offload and VAE tiling against diffusers' own.

- :func:`weight_bytes` (``path, components, dtype_bytes``): the bytes each component's
  floating-point weights take at ``dtype_bytes`` per element, read from the checkpoint's
  safetensors headers: what ``max_gpu_memory`` is weighed against when ``offload="auto"`` picks
  ``none`` / ``model`` / ``block`` (weights take at most 80% of the budget);
- :func:`vae_tiling_kwargs` (``tile``): the ``enable_tiling`` arguments of diffusers' video-style
  VAEs that omni uses for ``vae_tile=tile`` (square tiles overlapping by a quarter), so the
  reference pipeline tiles as omni does: ``pipe.vae.enable_tiling(**vae_tiling_kwargs(64))``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["vae_tiling_kwargs", "weight_bytes"]


def weight_bytes(path: str | Path, components: Iterable[str], dtype_bytes: int) -> dict[str, int]:
    """``{component: bytes}`` of the checkpoint at ``path`` (no weight is read)."""
    from omni_core.diffusion.acceleration.offload import component_bytes

    return component_bytes(Path(path), components, dtype_bytes)


def vae_tiling_kwargs(tile: int) -> dict[str, int]:
    """diffusers' ``enable_tiling`` arguments for omni's ``vae_tile=tile``."""
    from omni_core.diffusion.acceleration.vae_tiling import tile_kwargs

    return tile_kwargs(tile)
