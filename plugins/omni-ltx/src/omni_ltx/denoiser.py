"""What omni's acceleration must know about diffusers' ``LTX2VideoTransformer3DModel``.

Its repeated blocks are the ``transformer_blocks`` (video and audio streams side by side, with
their cross-attention): the scope of regional compile and of fp8 quantization. Each block
returns two streams, which omni's step caches do not handle yet, so the pipeline refuses the
caches; it declares no Ulysses plan (the audio stream's length would have to be split too).

Imported only when an LTX-2 transformer is accelerated.
"""

from __future__ import annotations

from typing import Any

from omni_core.diffusion import DenoiserAdapter


def ltx2_adapter(module: Any) -> DenoiserAdapter:
    """The adapter of every LTX-2 transformer (LTX-2.0 and 2.3 share the class)."""
    return DenoiserAdapter(
        architecture="LTX2VideoTransformer3DModel",
        blocks=("transformer_blocks",),
        fuse_qkv=False,
        notes="two-stream blocks: no step cache and no sequence plan yet",
    )
