"""What omni's acceleration must know about diffusers' ``StableAudioDiTModel``.

Its repeated blocks are ``transformer_blocks`` (``StableAudioDiTBlock``: self-attention with
rotary embeddings and grouped K/V heads, cross-attention to the T5 + seconds tokens, a GELU
feed-forward): the scope of regional compile and of fp8 quantization. Q, K and V are separate
projections (K/V narrower than Q), and there is no step-cache calibration nor a sequence plan,
so the pipeline refuses the caches and declares no parallel layout.

Imported only when a Stable Audio transformer is accelerated.
"""

from __future__ import annotations

from typing import Any

from omni_core.diffusion import DenoiserAdapter


def stable_audio_adapter(module: Any) -> DenoiserAdapter:
    """The adapter of every Stable Audio DiT (Stable Audio Open 1.0 and its fine-tunes)."""
    return DenoiserAdapter(
        architecture="StableAudioDiTModel",
        blocks=("transformer_blocks",),
        fuse_qkv=False,
        notes="no step-cache calibration and no sequence plan yet",
    )
