"""What omni's acceleration must know about diffusers' ``ZImageTransformer2DModel``.

Its repeated blocks are the ``noise_refiner`` (image tokens), ``context_refiner`` (caption
tokens) and the main ``layers`` (the joint sequence), all ``ZImageTransformerBlock``: the scope
of regional compile and of fp8 quantization. The step caches wrap the main ``layers`` only
(``cache_blocks``): the refiners run on different token sets, so a residual over all three
lists would mix shapes. diffusers registers ``ZImageTransformerBlock`` with the default
argument name ``hidden_states``, but its forward takes ``x``, so diffusers' own cache hooks fail
on it: the block's one stream is declared as ``block_streams=("x",)`` (omni's stream-aware
first-block hooks).
Its attention processor computes Q, K and V separately (no fused projections). There is no
TeaCache polynomial nor MagCache ratios (nobody has calibrated them), so only first-block
(which needs none) is served, and no sequence plan yet (no Ulysses).

Imported only when a Z-Image transformer is accelerated.
"""

from __future__ import annotations

from typing import Any

from omni_core.diffusion import DenoiserAdapter


def zimage_adapter(module: Any) -> DenoiserAdapter:
    """The adapter of every Z-Image transformer (Turbo and base share the class)."""
    return DenoiserAdapter(
        architecture="ZImageTransformer2DModel",
        blocks=("noise_refiner", "context_refiner", "layers"),
        fuse_qkv=False,
        cache_blocks=("layers",),
        block_streams=("x",),
        notes="step caches over the joint layers; no TeaCache/MagCache calibration, no "
        "sequence plan yet",
    )
