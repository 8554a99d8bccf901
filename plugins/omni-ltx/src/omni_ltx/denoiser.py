"""What omni's acceleration must know about diffusers' ``LTX2VideoTransformer3DModel``.

Its repeated blocks are the ``transformer_blocks`` (video and audio streams side by side, with
their cross-attention): the scope of regional compile, of fp8 quantization and of the step
caches. Each block returns ``(hidden_states, audio_hidden_states)``, declared as its
``block_streams`` so first-block and TeaCache replay a residual for each (first-block measures
the video stream; TeaCache reads the video timestep modulation ``temb``, with the uncalibrated
identity polynomial).

Ulysses cuts the video tokens through the blocks; the audio tokens (a few per video latent
frame) stay whole on every rank. So only the video self-attention (``attn1``) is sharded; the
text cross-attentions, the audio self-attention and the audio-to-video attention (video
queries, audio keys) run locally with the pipeline's kernels; the video-to-audio attention
(audio queries, video keys) gathers the video keys and values first (``gather_keys``), so every
rank computes the same audio stream. The per-token video inputs (the timestep modulations when
the timestep is per token, as for image to video, and both video rotary tables) are sliced
like the tokens; a video self-attention mask stays whole (the Ulysses kernel takes one over the
whole sequence).

Imported by the pipeline (the attention roles) and when an LTX-2 transformer is accelerated.
"""

from __future__ import annotations

from typing import Any

from omni_core.diffusion import DenoiserAdapter, SequencePlan

#: LTX2VideoTransformerBlock's per-token video inputs: (name, token dim). A modulation whose
#: timestep is one per row has one entry there and passes as it is.
_VIDEO_TOKENS = (("temb", 1), ("temb_ca_scale_shift", 1), ("temb_ca_gate", 1))
_VIDEO_ROPES = ("video_rotary_emb", "ca_video_rotary_emb")


#: The block's attention modules whose keys are another sequence (the prompt, or the other
#: stream). LTX2Attention does not say so itself (no ``is_cross_attention``), so the core's
#: default role would call them all self-attention.
CROSS = ("attn2", "audio_attn2", "audio_to_video_attn", "video_to_audio_attn")


def attention_role(name: str, module: Any) -> str:
    """The role of one attention module for ``route_attention``: ``cross`` for :data:`CROSS`
    (the fp8 mode then leaves those exact), ``self`` for the video and audio self-attention."""
    return "cross" if name.rsplit(".", 1)[-1] in CROSS else "self"


def _cut(sp: Any, x: Any, dim: int) -> Any:
    return sp.slice(x, dim=dim) if x is not None and x.shape[dim] == sp.seq_len else x


def _shard(sp: Any, args: tuple, kwargs: dict, first: bool) -> tuple[tuple, dict]:
    # diffusers calls the blocks with keywords (its gradient-checkpointing path, positional,
    # is training only); the video stream is hidden_states, the audio stream stays whole.
    if args:
        raise ValueError("LTX-2 Ulysses: the blocks are called with keyword arguments")
    kwargs = dict(kwargs)
    if first:
        kwargs["hidden_states"] = sp.shard(kwargs["hidden_states"], dim=1)
    for name, dim in _VIDEO_TOKENS:
        kwargs[name] = _cut(sp, kwargs.get(name), dim)
    for name in _VIDEO_ROPES:  # (cos, sin): [B, T, D] interleaved, [B, H, T, d] split
        rope = kwargs.get(name)
        if rope is not None:
            kwargs[name] = tuple(_cut(sp, r, r.dim() - 2) for r in rope)
    return args, kwargs


def _gather(sp: Any, output: Any) -> Any:
    video, audio = output
    return sp.gather(video, dim=1), audio


#: Ulysses for LTX2VideoTransformer3DModel: video tokens sharded, audio replicated.
SEQUENCE_PLAN = SequencePlan(
    blocks="transformer_blocks",
    shard_inputs=_shard,
    gather_output=_gather,
    attention={
        "attn2": "local",
        "audio_attn1": "local",
        "audio_attn2": "local",
        "audio_to_video_attn": "local",
        "video_to_audio_attn": "gather_keys",
    },
)


def ltx2_adapter(module: Any) -> DenoiserAdapter:
    """The adapter of every LTX-2 transformer (LTX-2.0 and 2.3 share the class)."""
    return DenoiserAdapter(
        architecture="LTX2VideoTransformer3DModel",
        blocks=("transformer_blocks",),
        fuse_qkv=False,
        block_streams=("hidden_states", "audio_hidden_states"),
        teacache_indicator="temb",
        sequence_plan=SEQUENCE_PLAN,
        notes="two-stream blocks (video, audio): video sharded by Ulysses, audio replicated; "
        "TeaCache uncalibrated",
    )
