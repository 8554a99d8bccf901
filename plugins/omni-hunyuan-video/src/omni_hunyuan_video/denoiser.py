"""What omni's acceleration must know about diffusers' ``HunyuanVideo15Transformer3DModel``.

Its repeated blocks are the 54 double-stream ``transformer_blocks`` (video and text tokens side
by side): the scope of regional compile, of fp8 quantization and of the step caches. Each block
returns ``(hidden_states, encoder_hidden_states)``, a layout diffusers' cache hooks have no
metadata for, so it is declared as the adapter's ``block_streams``: first-block measures the
video stream and replays a residual for both; TaylorSeer predicts both from their own Taylor
factors. There is no TeaCache polynomial nor MagCache ratios (nobody has calibrated them for
this model), so those caches stay refused.

Ulysses cuts the video tokens of every block input (and the rotary table, one row per video
token) along the sequence; the text tokens (prompt, glyph and image tokens) stay whole on every
rank. The blocks' joint attention puts the text *after* the video (``text_last``) and builds a
square mask from the text's padding mask, which the core's Ulysses attention turns into the full
sequence's.

Imported only when a HunyuanVideo-1.5 transformer is accelerated.
"""

from __future__ import annotations

from typing import Any

from omni_core.diffusion import DenoiserAdapter, SequencePlan


def _shard(sp: Any, args: tuple, kwargs: dict, first: bool) -> tuple[tuple, dict]:
    # HunyuanVideo15TransformerBlock(hidden_states, encoder_hidden_states, temb,
    # attention_mask, freqs_cis), positional; freqs_cis is (cos, sin), each [tokens, dim],
    # computed for the whole video.
    hidden, text, temb, mask, rope = args
    if first:
        hidden = sp.shard(hidden, dim=1)
    if rope is not None:
        rope = tuple(sp.slice(r, dim=0) for r in rope)
    return (hidden, text, temb, mask, rope), kwargs


def _gather(sp: Any, output: Any) -> Any:
    hidden, text = output
    return sp.gather(hidden, dim=1), text


#: Ulysses for HunyuanVideo15Transformer3DModel: video tokens cut after the patch embedding,
#: text replicated (and last in the joint attention).
SEQUENCE_PLAN = SequencePlan(
    blocks="transformer_blocks", shard_inputs=_shard, gather_output=_gather, text_last=True
)


def hunyuan_video15_adapter(module: Any) -> DenoiserAdapter:
    """The adapter of every HunyuanVideo-1.5 transformer (480p and 720p share the class)."""
    return DenoiserAdapter(
        architecture="HunyuanVideo15Transformer3DModel",
        blocks=("transformer_blocks",),
        fuse_qkv=False,
        block_streams=("hidden_states", "encoder_hidden_states"),
        sequence_plan=SEQUENCE_PLAN,
        notes="two-stream blocks (video, text); no TeaCache/MagCache calibration",
    )
