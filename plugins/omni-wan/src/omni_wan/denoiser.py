"""What omni's acceleration and parallelism must know about diffusers' ``WanTransformer3DModel``.

Registered by :mod:`omni_wan.plugin` as a ``DenoiserSpec`` (``omni_register_denoisers``):

- the repeated blocks live in ``blocks`` (regional compile, quantization scope, step caches);
- diffusers' Wan attention processors honour ``fuse_projections`` exactly, so QKV is fused;
- TeaCache reads block 0's ``temb`` and maps its relative change through a polynomial fitted per
  model size (below, with where each comes from);
- Ulysses cuts the video tokens of every block input (and the per-token side inputs) along the
  sequence; the text tokens stay whole.

Imported only when a Wan transformer is accelerated or parallelized (it imports no torch itself).
"""

from __future__ import annotations

from typing import Any

from omni_core.diffusion import DenoiserAdapter, SequencePlan

# TeaCache coefficients for Wan 2.1 are the published "ret_steps" polynomials of TeaCache4Wan2.1
# (ali-vilab/TeaCache, Liu et al. 2024, "Timestep Embedding Tells: It's Time to Cache for Video
# Diffusion Model"), fitted on the timestep modulation ``e0`` -- what diffusers' Wan blocks receive
# as ``temb``. Wan2.2-TI2V-5B: a community fit circulated with Wan 2.2 ports (6 terms); unverified
# by us. Re-fit them with the calibration helper in sdk-docs/docs/acceleration.md before trusting
# quality numbers.
WAN21_T2V_1_3B = (-5.21862437e04, 9.23041404e03, -5.28275948e02, 1.36987616e01, -4.99875664e-02)
WAN21_T2V_14B = (-3.03318725e05, 4.90537029e04, -2.65530556e03, 5.87365115e01, -3.15583525e-01)
WAN21_I2V_14B_480P = (2.57151496e05, -3.54229917e04, 1.40286849e03, -1.35890334e01, 1.32517977e-01)
WAN21_I2V_14B_720P = (8.10705460e03, 2.13393892e03, -3.72934672e02, 1.66203073e01, -4.17769401e-02)
WAN22_TI2V_5B = (
    1.57472669e05,
    -1.15702395e05,
    3.10761669e04,
    -3.83116651e03,
    2.21608777e02,
    -4.81179567e00,
)


def wan_indicator(block: Any, args: tuple, kwargs: dict) -> Any:
    """Wan block 0's ``temb`` (the timestep modulation ``e0``); Wan2.2 TI2V passes one per
    token ([B, tokens, 6, dim]): its last token stands for the video (the first frame may be a
    clean conditioning frame), which keeps the stored indicator small."""
    temb = kwargs["temb"] if "temb" in kwargs else args[2]
    return temb[:, -1] if temb.ndim == 4 else temb


def _shard(sp: Any, args: tuple, kwargs: dict, first: bool) -> tuple[tuple, dict]:
    # WanTransformerBlock(hidden_states, encoder_hidden_states, temb, rotary_emb), positional.
    hidden, text, temb, rope = args
    if first:
        hidden = sp.shard(hidden, dim=1)
    if temb.ndim == 4:  # Wan2.2 TI2V: one timestep embedding per token [B, S, 6, D]
        temb = sp.slice(temb, dim=1)
    if rope is not None:  # (cos, sin), each [1, S, 1, D], computed for the full sequence
        rope = tuple(sp.slice(r, dim=1) for r in rope)
    return (hidden, text, temb, rope), kwargs


def _gather(sp: Any, output: Any) -> Any:
    return sp.gather(output, dim=1)


#: Ulysses for WanTransformer3DModel: video tokens cut after the patch embedding, text replicated.
SEQUENCE_PLAN = SequencePlan(blocks="blocks", shard_inputs=_shard, gather_output=_gather)


def wan_adapter(module: Any) -> DenoiserAdapter:
    """Wan 2.1/2.2: pick the TeaCache polynomial from the transformer's size and conditioning."""
    config = getattr(module, "config", None)
    dim = int(getattr(config, "num_attention_heads", 0) or 0) * int(
        getattr(config, "attention_head_dim", 0) or 0
    )
    image = getattr(config, "image_dim", None) is not None
    coefficients, source = (1.0, 0.0), "uncalibrated identity polynomial (unknown Wan size)"
    if dim == 1536:
        coefficients, source = WAN21_T2V_1_3B, "TeaCache4Wan2.1 T2V-1.3B (ret_steps)"
    elif dim == 3072:
        coefficients, source = WAN22_TI2V_5B, "community fit for Wan2.2-TI2V-5B (unverified)"
    elif dim == 5120 and image:
        coefficients, source = WAN21_I2V_14B_480P, "TeaCache4Wan2.1 I2V-14B-480P (ret_steps)"
    elif dim == 5120:
        coefficients, source = WAN21_T2V_14B, "TeaCache4Wan2.1 T2V-14B (ret_steps)"
    return DenoiserAdapter(
        architecture="WanTransformer3DModel",
        blocks=("blocks",),
        # Safe for Wan2.1 I2V too: fusion keeps add_k_proj, which diffusers' processor reads to
        # split the CLIP image tokens from the text.
        fuse_qkv=True,
        teacache_indicator=wan_indicator,
        teacache_coefficients=coefficients,
        teacache_source=source,
        sequence_plan=SEQUENCE_PLAN,
        cache_dit_pattern="Pattern_2",
    )
