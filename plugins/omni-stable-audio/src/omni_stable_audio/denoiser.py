"""What omni's acceleration must know about diffusers' ``StableAudioDiTModel``.

Its repeated blocks are ``transformer_blocks`` (``StableAudioDiTBlock``: self-attention with
rotary embeddings and grouped K/V heads, cross-attention to the T5 + seconds tokens, a GELU
feed-forward): the scope of regional compile, of fp8 quantization and of the step caches. Q, K
and V are separate projections (K/V narrower than Q). A block returns its hidden states as a
bare tensor, a class diffusers' cache hooks have no metadata for, so the adapter declares that
one stream (``block_streams``); first-block replays it and TaylorSeer predicts it. There is no
TeaCache polynomial nor MagCache ratios (nobody has calibrated them for this DiT), so those
caches stay refused.

No Ulysses plan: the blocks' attention processor (diffusers' ``StableAudioAttnProcessor2_0``)
calls ``torch``'s SDPA itself instead of diffusers' ``dispatch_attention_fn``, so omni cannot
route its attention through the sequence all-to-all without rewriting that processor; and
the sequence is short (1 global + 1024 latent tokens at the 47 s maximum), so cutting it
would gain little over CFG-parallel.

The pipeline loads the DiT as :class:`~omni_stable_audio.lora.StableAudioLoraDiT` (the same
class with diffusers' PEFT mixin, for LoRA); both class names are registered.

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
        block_streams=("hidden_states",),
        notes="no TeaCache/MagCache calibration; no sequence plan (SDPA called directly)",
    )
