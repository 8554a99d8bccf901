"""What omni's acceleration and parallelism must know about diffusers' ``FluxTransformer2DModel``
(FLUX.1) and ``Flux2Transformer2DModel`` (FLUX.2).

Registered by :mod:`omni_flux.plugin` as a ``DenoiserSpec`` (``omni_register_denoisers``):

- the repeated blocks are the double-stream ``transformer_blocks`` then the single-stream
  ``single_transformer_blocks`` (regional compile, quantization scope, step caches);
- diffusers' Flux attention processor honours ``fuse_projections`` (``to_qkv`` and
  ``to_added_qkv``), so QKV is fused;
- TeaCache reads block 0's modulated image input (``norm1(hidden_states, emb=temb)``), the
  indicator TeaCache4FLUX was fitted on; MagCache takes the FLUX ratios diffusers ships;
- Ulysses cuts the image tokens through both block lists (their rotary frequencies too: the
  image part of the joint ``[text, image]`` table); the text tokens stay replicated.

FLUX.2's single-stream blocks take and return the joint ``[text, image]`` sequence (the text
is concatenated in front once, between the two lists): its plan keeps that text replicated and
cuts the image part; there is no step-cache calibration (FLUX.2 refuses the caches).

Imported only when a FLUX transformer is accelerated or parallelized.
"""

from __future__ import annotations

from typing import Any

from omni_core.diffusion import DenoiserAdapter, SequencePlan

#: TeaCache4FLUX's polynomial (ali-vilab/TeaCache, Liu et al. 2024, "Timestep Embedding Tells:
#: It's Time to Cache for Video Diffusion Model"), fitted on FLUX.1-dev's first block's modulated
#: image input. Re-fit it with the calibration helper in sdk-docs/docs/acceleration.md for
#: schnell or Kontext before trusting quality numbers.
TEACACHE_FLUX = (4.98651651e02, -2.83781631e02, 5.58554382e01, -3.82021401e00, 2.64230861e-01)


def flux_indicator(block: Any, args: tuple, kwargs: dict) -> Any:
    """FLUX block 0's modulated image input (what TeaCache4FLUX's polynomial was fitted on)."""
    hidden_states = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
    temb = kwargs["temb"] if "temb" in kwargs else args[2]
    return block.norm1(hidden_states, emb=temb)[0]


def _shard(sp: Any, args: tuple, kwargs: dict, first: bool) -> tuple[tuple, dict]:
    # Both block kinds are called with keywords: hidden_states (image), encoder_hidden_states
    # (text, replicated), temb (per sample), image_rotary_emb ((cos, sin) over [text, image]).
    kwargs = dict(kwargs)
    if first:
        kwargs["hidden_states"] = sp.shard(kwargs["hidden_states"], dim=1)
    text = kwargs["encoder_hidden_states"].shape[1]
    rope = kwargs.get("image_rotary_emb")
    if rope is not None:
        import torch

        kwargs["image_rotary_emb"] = tuple(
            torch.cat([r[:text], sp.slice(r[text:], dim=0)], dim=0) for r in rope
        )
    return args, kwargs


def _gather(sp: Any, output: Any) -> Any:
    text, image = output
    return text, sp.gather(image, dim=1)


#: Ulysses for FluxTransformer2DModel: image tokens cut through both block lists, text replicated.
SEQUENCE_PLAN = SequencePlan(
    blocks=("transformer_blocks", "single_transformer_blocks"),
    shard_inputs=_shard,
    gather_output=_gather,
)


def flux_adapter(module: Any) -> DenoiserAdapter:
    """The adapter of every FLUX.1 transformer (dev, schnell and Kontext share the class)."""
    from diffusers.hooks.mag_cache import FLUX_MAG_RATIOS

    return DenoiserAdapter(
        architecture="FluxTransformer2DModel",
        blocks=("transformer_blocks", "single_transformer_blocks"),
        fuse_qkv=True,
        teacache_indicator=flux_indicator,
        teacache_coefficients=TEACACHE_FLUX,
        teacache_source="TeaCache4FLUX (FLUX.1-dev)",
        mag_ratios=tuple(float(r) for r in FLUX_MAG_RATIOS.tolist()),
        mag_source="MagCache's FLUX.1 ratios (Zehong-Ma/MagCache, as diffusers ships them)",
        sequence_plan=SEQUENCE_PLAN,
        cache_dit_pattern="Pattern_1",
    )


def _shard_flux2(sp: Any, args: tuple, kwargs: dict, first: bool) -> tuple[tuple, dict]:
    # Double-stream blocks: hidden_states (image), encoder_hidden_states (text). Single-stream
    # blocks: hidden_states = [text, image shard], encoder_hidden_states None. Both take the
    # (cos, sin) table over the whole [text, image] sequence as image_rotary_emb.
    import torch

    kwargs = dict(kwargs)
    if first:
        kwargs["hidden_states"] = sp.shard(kwargs["hidden_states"], dim=1)
    rope = kwargs["image_rotary_emb"]
    text = rope[0].shape[0] - sp.seq_len  # the text tokens in front of the image tokens
    kwargs["image_rotary_emb"] = tuple(
        torch.cat([r[:text], sp.slice(r[text:], dim=0)], dim=0) for r in rope
    )
    return args, kwargs


def _gather_flux2(sp: Any, output: Any) -> Any:
    # The last single-stream block returns [text, image shard]: gather the image part.
    import torch

    text = output.shape[1] - sp.local_len
    return torch.cat([output[:, :text], sp.gather(output[:, text:], dim=1)], dim=1)


#: Ulysses for Flux2Transformer2DModel: image tokens cut through both lists, text replicated.
FLUX2_SEQUENCE_PLAN = SequencePlan(
    blocks=("transformer_blocks", "single_transformer_blocks"),
    shard_inputs=_shard_flux2,
    gather_output=_gather_flux2,
)


def flux2_adapter(module: Any) -> DenoiserAdapter:
    """The adapter of every FLUX.2 transformer (dev and klein share the class)."""
    return DenoiserAdapter(
        architecture="Flux2Transformer2DModel",
        blocks=("transformer_blocks", "single_transformer_blocks"),
        fuse_qkv=True,
        sequence_plan=FLUX2_SEQUENCE_PLAN,
        notes="no step-cache calibration: FLUX.2's single-stream blocks return the joint "
        "sequence, and its pipelines refuse the step caches",
    )
