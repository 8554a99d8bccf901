"""QKV fusion must not change what a model computes.

Wan2.1 I2V is the case that broke: diffusers' ``WanAttnProcessor`` reads ``attn.add_k_proj is
not None`` to split the CLIP image tokens off the text, so a fusion that set the unfused
projections to ``None`` treated the image tokens as text (up to 58/255 off in pixels). The tiny
I2V checkpoint is the real layout omni-wan loads.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from omni_core.diffusion.acceleration.compile import fuse_qkv

TEXT_TOKENS = 512  # diffusers' WanAttnProcessor hard-codes the T5 context length


@pytest.fixture(scope="session")
def i2v_transformer(tmp_path_factory) -> torch.nn.Module:
    testing = pytest.importorskip("omni_wan.testing")
    from diffusers import WanTransformer3DModel

    path: Path = testing.build_tiny_wan(tmp_path_factory.mktemp("wan-i2v"), "i2v")
    return WanTransformer3DModel.from_pretrained(path / "transformer").eval()


def _i2v_inputs(model: torch.nn.Module) -> dict:
    cfg = model.config
    g = torch.Generator().manual_seed(0)
    return {
        "hidden_states": torch.randn(1, cfg.in_channels, 2, 8, 8, generator=g),
        "timestep": torch.tensor([500]),
        "encoder_hidden_states": torch.randn(1, TEXT_TOKENS, cfg.text_dim, generator=g),
        "encoder_hidden_states_image": torch.randn(1, 5, cfg.image_dim, generator=g),
        "return_dict": False,
    }


def _run(model: torch.nn.Module, inputs: dict) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs)[0]


def test_fused_i2v_matches_unfused(i2v_transformer):
    model = copy.deepcopy(i2v_transformer)
    inputs = _i2v_inputs(model)
    reference = _run(i2v_transformer, inputs)
    cross = model.blocks[0].attn2
    assert cross.add_k_proj is not None  # the I2V flag the processor reads

    before = sum(p.numel() for p in model.parameters())
    assert fuse_qkv(model) == 2 * len(model.blocks)
    torch.testing.assert_close(_run(model, inputs), reference, rtol=1e-5, atol=1e-5)
    assert cross.fused_projections and cross.add_k_proj is not None
    # Fusing costs no memory: the unfused weights are gone, only the fused copies remain.
    assert sum(p.numel() for p in model.parameters()) == before
    names = {n for n, _ in model.named_parameters()}
    assert "blocks.0.attn2.to_added_kv.weight" in names
    assert "blocks.0.attn2.add_k_proj.weight" not in names
    assert "blocks.0.attn1.to_q.weight" not in names


def test_fused_stand_ins_compute_the_same_projection(i2v_transformer):
    """A processor that ignores the fused path still gets the exact projection."""
    model = copy.deepcopy(i2v_transformer)
    fuse_qkv(model)
    x = torch.randn(3, i2v_transformer.blocks[0].attn2.add_k_proj.in_features)
    for attn_name, proj in (
        ("attn2", "add_k_proj"),
        ("attn2", "add_v_proj"),
        ("attn2", "to_k"),
        ("attn1", "to_q"),
        ("attn1", "to_v"),
    ):
        original = getattr(getattr(i2v_transformer.blocks[0], attn_name), proj)
        stand_in = getattr(getattr(model.blocks[0], attn_name), proj)
        inp = torch.randn(3, original.in_features) if proj != "add_k_proj" else x
        torch.testing.assert_close(stand_in(inp), original(inp))
        assert stand_in.out_features == original.out_features
        torch.testing.assert_close(stand_in.weight, original.weight)


def test_fused_stand_ins_follow_a_swapped_fused_module(i2v_transformer):
    """Quantization replaces the fused linear; the stand-in must use the new module."""
    model = copy.deepcopy(i2v_transformer)
    fuse_qkv(model)
    attn = model.blocks[0].attn2
    fused = attn.to_added_kv

    class Doubled(torch.nn.Module):
        def forward(self, x):
            return 2 * fused(x)

    x = torch.randn(2, fused.in_features)
    expected = fused(x).chunk(2, dim=-1)[1] * 2
    attn.to_added_kv = Doubled()
    torch.testing.assert_close(attn.add_v_proj(x), expected)


def test_fused_model_state_dict_has_no_duplicates(i2v_transformer):
    model = copy.deepcopy(i2v_transformer)
    fuse_qkv(model)
    keys = list(model.state_dict())
    assert len(keys) == len(set(keys))
    assert not any(k.endswith(("add_k_proj.weight", "attn1.to_q.weight")) for k in keys)
    assert "blocks.0.attn2.to_q.weight" in keys  # cross-attention Q is not fused: kept
    # fusing twice is a no-op
    assert fuse_qkv(model) == 0


def test_fused_i2v_compiles_without_graph_breaks(i2v_transformer):
    """The stand-ins are plain modules Dynamo traces through (the fused path never calls them)."""
    from omni_core.diffusion.acceleration.compile import compile_repeated_blocks

    model = copy.deepcopy(i2v_transformer)
    fuse_qkv(model)
    report = compile_repeated_blocks(model, backend="aot_eager", fullgraph=True)
    assert report.blocks == len(model.blocks)
    inputs = _i2v_inputs(model)
    torch.testing.assert_close(
        _run(model, inputs), _run(i2v_transformer, inputs), rtol=1e-5, atol=1e-5
    )
