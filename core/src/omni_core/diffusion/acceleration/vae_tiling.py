"""VAE tiling and slicing for decode and encode: diffusers' ``enable_tiling`` /
``enable_slicing``, by option or automatically when a decode would not fit.

A pipeline builds one :class:`VaeMemory` around its VAE and calls :meth:`VaeMemory.before`
with its own estimate of the bytes the next decode (or encode) needs, before running it::

    self.vae_memory = VaeMemory(self.vae, options, tile_kwargs={...})
    self.vae_memory.before(needed_bytes, batch=rows)
    pixels = self.vae.decode(latents)

``options.memory.vae_tiling``: ``on`` tiles always, ``off`` never, ``auto`` (default) when the
estimate exceeds 90% of the device's free memory (the platform's
:meth:`~omni_core.contract.platforms.Platform.free_memory_bytes`; a platform that cannot tell, such
as the CPU, never tiles on its own). ``vae_slicing`` (auto: with tiling, for batches over one)
decodes a batch one sample at a time. ``tile_kwargs`` are the VAE class's own ``enable_tiling``
arguments (default: :func:`tile_kwargs` of ``vae_tile``, diffusers' video VAE names; a VAE with
other names gets its own from the pipeline).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.pipeline import PipelineOptions

#: auto tiles when a decode needs more than this share of the free device memory.
FREE_SHARE = 0.9


def tile_kwargs(tile: int) -> dict[str, int]:
    """``enable_tiling`` arguments of diffusers' video-style VAEs (``tile_sample_min_*`` /
    ``tile_sample_stride_*``) for square ``tile``-pixel tiles overlapping by a quarter."""
    stride = tile * 3 // 4
    return {
        "tile_sample_min_height": tile,
        "tile_sample_min_width": tile,
        "tile_sample_stride_height": stride,
        "tile_sample_stride_width": stride,
    }


def activation_bytes(elements: int, channels: int, dtype_bytes: int, copies: int = 4) -> int:
    """A decode's peak estimate: ``copies`` activations of ``channels`` per output element."""
    return elements * channels * dtype_bytes * copies


@dataclass
class VaeMemory:
    """Switches one VAE's tiling / slicing per call; see the module docstring."""

    vae: Any
    options: PipelineOptions
    #: ``enable_tiling`` arguments; None: :func:`tile_kwargs` of ``memory.vae_tile`` if set.
    tile_kwargs: dict[str, Any] | None = None
    tiled: bool = False
    sliced: bool = False
    #: How many decodes / encodes ran tiled (reported in results).
    tiled_calls: int = 0

    def __post_init__(self) -> None:
        if self.tile_kwargs is None:
            tile = self.options.memory.vae_tile
            self.tile_kwargs = {} if tile is None else tile_kwargs(tile)
        if self.options.memory.vae_tiling == "on":
            self._set(True, self.options.memory.vae_slicing != "off")
        elif self.options.memory.vae_slicing == "on":
            self._set(False, True)

    def _set(self, tiled: bool, sliced: bool) -> None:
        if tiled != self.tiled:
            if tiled:
                self.vae.enable_tiling(**self.tile_kwargs)
            else:
                self.vae.disable_tiling()
            self.tiled = tiled
        if sliced != self.sliced:
            if sliced:
                self.vae.enable_slicing()
            else:
                self.vae.disable_slicing()
            self.sliced = sliced

    def before(self, needed_bytes: int, batch: int = 1) -> bool:
        """Set tiling / slicing for a call that needs about ``needed_bytes``; True: tiled."""
        memory = self.options.memory
        if memory.vae_tiling == "auto":
            free = self.options.platform.free_memory_bytes(self.options.device)
            tiled = free is not None and needed_bytes > free * FREE_SHARE
            slicing = {"on": True, "off": False}.get(memory.vae_slicing, tiled and batch > 1)
            self._set(tiled, slicing)
        if self.tiled:
            self.tiled_calls += 1
        return self.tiled


__all__ = ["FREE_SHARE", "VaeMemory", "activation_bytes", "tile_kwargs"]
