"""What omni's acceleration must know about diffusers' ``ZImageTransformer2DModel``.

Its repeated blocks are the ``noise_refiner`` (image tokens), ``context_refiner`` (caption
tokens) and the main ``layers`` (the joint sequence), all ``ZImageTransformerBlock``: the scope
of regional compile and of fp8 quantization. Its attention processor computes Q, K and V
separately (no fused projections), and there is no step-cache calibration nor a sequence plan
yet, so the pipeline refuses the caches and declares no parallel layout.

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
        notes="no step-cache calibration and no sequence plan yet",
    )
