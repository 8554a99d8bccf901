"""What omni's acceleration must know about diffusers' ``HunyuanVideo15Transformer3DModel``.

Its repeated blocks are the 54 double-stream ``transformer_blocks`` (video and text tokens side
by side): the scope of regional compile and of fp8 quantization. There is no step-cache
calibration nor a sequence plan yet, so the pipeline refuses the caches and declares no
parallel layout.

Imported only when a HunyuanVideo-1.5 transformer is accelerated.
"""

from __future__ import annotations

from typing import Any

from omni_core.diffusion import DenoiserAdapter


def hunyuan_video15_adapter(module: Any) -> DenoiserAdapter:
    """The adapter of every HunyuanVideo-1.5 transformer (480p and 720p share the class)."""
    return DenoiserAdapter(
        architecture="HunyuanVideo15Transformer3DModel",
        blocks=("transformer_blocks",),
        fuse_qkv=False,
        notes="no step-cache calibration and no sequence plan yet",
    )
