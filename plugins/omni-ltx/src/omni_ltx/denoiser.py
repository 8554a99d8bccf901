"""What omni's acceleration must know about diffusers' ``LTX2VideoTransformer3DModel``.

Its repeated blocks are the ``transformer_blocks`` (video and audio streams side by side, with
their cross-attention): the scope of regional compile, of fp8 quantization and of the step
caches. Each block returns ``(hidden_states, audio_hidden_states)``, declared as its
``block_streams`` so first-block and TeaCache replay a residual for each (first-block measures
the video stream; TeaCache reads the video timestep modulation ``temb``, with the uncalibrated
identity polynomial). It declares no Ulysses plan (the audio stream's length would have to be
split too).

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
        block_streams=("hidden_states", "audio_hidden_states"),
        teacache_indicator="temb",
        notes="two-stream blocks (video, audio): no sequence plan yet; TeaCache uncalibrated",
    )
