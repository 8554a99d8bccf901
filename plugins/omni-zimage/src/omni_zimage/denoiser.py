"""What omni's acceleration must know about diffusers' ``ZImageTransformer2DModel``.

Its repeated blocks are the ``noise_refiner`` (image tokens), ``context_refiner`` (caption
tokens) and the main ``layers`` (the joint sequence), all ``ZImageTransformerBlock``: the scope
of regional compile and of fp8 quantization. The step caches wrap the main ``layers`` only
(``cache_blocks``): the refiners run on different token sets, so a residual over all three
lists would mix shapes. diffusers registers ``ZImageTransformerBlock`` with the default
argument name ``hidden_states``, but its forward takes ``x``, so diffusers' own cache hooks fail
on it: the block's one stream is declared as ``block_streams=("x",)`` (omni's stream-aware
first-block and TaylorSeer hooks).
Its attention processor computes Q, K and V separately (no fused projections). There is no
TeaCache polynomial nor MagCache ratios (nobody has calibrated them), so only first-block and
TaylorSeer (which need none) are served.

Ulysses cuts the unified sequence (image tokens, then caption tokens, padded per batch to one
length) through the main ``layers``: every token is sharded, none is replicated, so their
attention is plain self-attention over the shards. Each layer also takes the unified padding
mask ``[B, L]`` and the rotary table ``[B, L, D/2]`` (complex) for the whole sequence, and, in
diffusers' omni mode, a per-token noise mask: each is sliced like the tokens; the processor
turns the mask into a key-padding mask of the local view, whose columns the core's Ulysses
attention gathers. The refiners run before, on whole sequences, with their own kernels.

Imported only when a Z-Image transformer is accelerated.
"""

from __future__ import annotations

from typing import Any

from omni_core.diffusion import DenoiserAdapter, SequencePlan

#: ZImageTransformerBlock.forward's per-token arguments after ``x``, positional order.
_PER_TOKEN = {1: "attn_mask", 2: "freqs_cis", 4: "noise_mask"}


def _shard(sp: Any, args: tuple, kwargs: dict, first: bool) -> tuple[tuple, dict]:
    # ZImageTransformerBlock(x, attn_mask, freqs_cis, adaln_input, noise_mask, adaln_noisy,
    # adaln_clean): x is [B, L, dim]; the mask, the rope and the noise mask cover all L tokens.
    values = list(args)
    if first:
        if values:
            values[0] = sp.shard(values[0], dim=1)
        else:
            kwargs = {**kwargs, "x": sp.shard(kwargs["x"], dim=1)}
    for index, name in _PER_TOKEN.items():
        if index < len(values) and values[index] is not None:
            values[index] = sp.slice(values[index], dim=1)
        elif kwargs.get(name) is not None:
            kwargs = {**kwargs, name: sp.slice(kwargs[name], dim=1)}
    return tuple(values), kwargs


def _gather(sp: Any, output: Any) -> Any:
    return sp.gather(output, dim=1)


#: Ulysses for ZImageTransformer2DModel: the unified sequence cut through the main layers.
SEQUENCE_PLAN = SequencePlan(blocks="layers", shard_inputs=_shard, gather_output=_gather)


def zimage_adapter(module: Any) -> DenoiserAdapter:
    """The adapter of every Z-Image transformer (Turbo and base share the class)."""
    return DenoiserAdapter(
        architecture="ZImageTransformer2DModel",
        blocks=("noise_refiner", "context_refiner", "layers"),
        fuse_qkv=False,
        cache_blocks=("layers",),
        block_streams=("x",),
        sequence_plan=SEQUENCE_PLAN,
        notes="step caches over the joint layers; no TeaCache/MagCache calibration",
    )
