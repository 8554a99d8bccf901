"""What omni's acceleration and parallelism must know about ``QwenImageTransformer2DModel``.

Registered by :mod:`omni_qwen.plugin` as a ``DenoiserSpec`` (``omni_register_denoisers``):

- the repeated (double-stream) blocks live in ``transformer_blocks``;
- QKV is not fused: diffusers' Qwen-Image attention processor ignores fused projections;
- TeaCache reads block 0's modulated image input, which its polynomial was fitted on;
- Ulysses cuts the image tokens (and their rotary frequencies, and Edit-2511's per-token
  ``modulate_index``); the text tokens stay replicated on every rank.

Imported only when a Qwen-Image transformer is accelerated or parallelized.
"""

from __future__ import annotations

from typing import Any

from omni_core.diffusion import DenoiserAdapter, SequencePlan

#: Qwen-Image's TeaCache polynomial: community values labelled "to be tuned" by their authors,
#: fitted on the first block's modulated image input; unverified by us. Re-fit them with the
#: calibration helper in sdk-docs/docs/acceleration.md before trusting quality numbers.
QWEN_IMAGE = (4.98651651e02, -2.83781631e02, 5.58554382e01, -3.82021401e00, 2.64230861e-01)


def qwen_image_indicator(block: Any, args: tuple, kwargs: dict) -> Any:
    """Qwen-Image block 0's modulated image input (what its TeaCache polynomial was fitted on)."""
    hidden_states = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
    temb = kwargs["temb"] if "temb" in kwargs else args[3]
    mod1 = block.img_mod(temb).chunk(2, dim=-1)[0]
    shift, scale, _ = mod1.chunk(3, dim=-1)
    return block.img_norm1(hidden_states) * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


def _shard(sp: Any, args: tuple, kwargs: dict, first: bool) -> tuple[tuple, dict]:
    # QwenImageTransformerBlock is called with keywords; text stays replicated.
    kwargs = dict(kwargs)
    if first:
        kwargs["hidden_states"] = sp.shard(kwargs["hidden_states"], dim=1)
    rope = kwargs.get("image_rotary_emb")
    if rope is not None:  # (image freqs [S_img, D/2], text freqs): only the image part is cut
        kwargs["image_rotary_emb"] = (sp.slice(rope[0], dim=0), rope[1])
    index = kwargs.get("modulate_index")
    if index is not None:  # Qwen-Image-Edit-2511 zero_cond_t: [B, S_img]
        kwargs["modulate_index"] = sp.slice(index, dim=1)
    return args, kwargs


def _gather(sp: Any, output: Any) -> Any:
    text, image = output
    return text, sp.gather(image, dim=1)


#: Ulysses for QwenImageTransformer2DModel: image tokens cut, text tokens replicated.
SEQUENCE_PLAN = SequencePlan(
    blocks="transformer_blocks", shard_inputs=_shard, gather_output=_gather
)


def qwen_image_adapter(module: Any) -> DenoiserAdapter:
    """The adapter of every Qwen-Image transformer (t2i and the edit variants share it)."""
    return DenoiserAdapter(
        architecture="QwenImageTransformer2DModel",
        blocks=("transformer_blocks",),
        teacache_indicator=qwen_image_indicator,
        teacache_coefficients=QWEN_IMAGE,
        teacache_source="community fit for Qwen-Image (unverified)",
        fuse_qkv=False,  # diffusers' Qwen processor ignores fused projections
        sequence_plan=SEQUENCE_PLAN,
        cache_dit_pattern="Pattern_0",
    )
