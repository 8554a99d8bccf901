"""route_attention: a diffusers model's attention runs omni's kernels, per role, unchanged maths."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from omni_core.contract.attention import AttentionRouter, use_router
from omni_core.diffusion.attention_routing import route_attention, unroute_attention
from omni_core.runtime.kernels.sdpa import sdpa


def _spy_router(calls: list[tuple[str, tuple[int, ...]]]) -> AttentionRouter:
    def make(role: str) -> Any:
        def kernel(q: Any, k: Any, v: Any, *, attn_mask: Any = None, scale: Any = None) -> Any:
            calls.append((role, tuple(q.shape)))
            return sdpa(q, k, v, attn_mask=attn_mask, scale=scale)

        return kernel

    roles = ("self", "cross", "joint")
    return AttentionRouter(
        functions={r: make(r) for r in roles}, names={r: f"spy-{r}" for r in roles}
    )


@pytest.fixture
def wan() -> Any:
    from diffusers import WanTransformer3DModel

    torch.manual_seed(0)
    model = WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=12,
        in_channels=4,
        out_channels=4,
        text_dim=16,
        freq_dim=32,
        ffn_dim=32,
        num_layers=2,
        rope_max_seq_len=32,
    ).eval()
    inputs = {
        "hidden_states": torch.randn(1, 4, 2, 8, 8),
        "timestep": torch.tensor([500]),
        "encoder_hidden_states": torch.randn(1, 7, 16),
        "return_dict": False,
    }
    return model, inputs


@pytest.fixture
def flux() -> Any:
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    model = FluxTransformer2DModel(
        patch_size=1,
        in_channels=4,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,
        pooled_projection_dim=32,
        axes_dims_rope=[4, 4, 8],
    ).eval()
    inputs = {
        "hidden_states": torch.randn(1, 16, 4),
        "encoder_hidden_states": torch.randn(1, 5, 32),
        "pooled_projections": torch.randn(1, 32),
        "timestep": torch.tensor([0.5]),
        "img_ids": torch.zeros(16, 3),
        "txt_ids": torch.zeros(5, 3),
        "return_dict": False,
    }
    return model, inputs


@torch.no_grad()
def test_runtime_routes_wan_self_and_cross(wan: Any) -> None:
    model, inputs = wan
    expected = model(**inputs)[0]
    calls: list[tuple[str, tuple[int, ...]]] = []
    report = route_attention(model, _spy_router(calls))
    assert report.routed == {"self": 2, "cross": 2, "joint": 0} and report.skipped == []
    out = model(**inputs)[0]
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert [role for role, _ in calls] == ["self", "cross"] * 2
    # Idempotent: routing twice changes nothing, and the kernel can be swapped.
    assert route_attention(model, _spy_router(calls)).total == 4
    calls.clear()
    assert unroute_attention(model) == 4
    torch.testing.assert_close(model(**inputs)[0], expected, rtol=1e-5, atol=1e-5)
    assert calls == []


@torch.no_grad()
def test_runtime_routes_flux_joint(flux: Any) -> None:
    model, inputs = flux
    expected = model(**inputs)[0]
    calls: list[tuple[str, tuple[int, ...]]] = []
    report = route_attention(model, _spy_router(calls))
    assert report.routed["joint"] == 1 and report.routed["self"] == 1
    torch.testing.assert_close(model(**inputs)[0], expected, rtol=1e-5, atol=1e-5)
    assert sorted(role for role, _ in calls) == ["joint", "self"]
    unroute_attention(model)


@torch.no_grad()
def test_runtime_unrouted_models_are_untouched(wan: Any) -> None:
    """The module-level shim falls through to diffusers outside routed processors."""
    from diffusers import WanTransformer3DModel

    model, inputs = wan
    calls: list[tuple[str, tuple[int, ...]]] = []
    route_attention(model, _spy_router(calls))
    torch.manual_seed(1)
    other = WanTransformer3DModel(**model.config).eval()  # same module, not routed
    other(**inputs)
    assert calls == []
    model(**inputs)
    assert len(calls) == 4
    unroute_attention(model)


@torch.no_grad()
def test_runtime_router_none_binds_the_active_router(wan: Any) -> None:
    """router=None: the router active when routing (use_router), else plain SDPA."""
    model, inputs = wan
    calls: list[tuple[str, tuple[int, ...]]] = []
    with use_router(_spy_router(calls)):
        route_attention(model, None)
    model(**inputs)
    assert [role for role, _ in calls] == ["self", "cross"] * 2
    calls.clear()
    route_attention(model, None)  # no active router now: SDPA
    model(**inputs)
    assert calls == []
    unroute_attention(model)


def test_runtime_routed_blocks_compile_without_graph_breaks(wan: Any) -> None:
    """The routed __call__ traces cleanly under torch.compile (no per-call Python state)."""
    import torch._dynamo

    model, inputs = wan
    route_attention(model, _spy_router([]))
    block = model.blocks[0]
    rotary = model.rope(inputs["hidden_states"])
    hidden = torch.randn(1, 32, 24)
    text = torch.randn(1, 7, 24)
    temb = torch.randn(1, 6, 24)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(block)(hidden, text, temb, rotary)
    assert explanation.graph_break_count == 0
    compiled = torch.compile(block, backend="aot_eager")
    with torch.no_grad():
        torch.testing.assert_close(
            compiled(hidden, text, temb, rotary), block(hidden, text, temb, rotary)
        )
    unroute_attention(model)
    torch._dynamo.reset()


def test_runtime_old_style_processors_are_reported_skipped() -> None:
    from diffusers import UNet2DModel

    model = UNet2DModel(
        sample_size=8,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=4,
    )
    report = route_attention(model, None)
    assert report.total == 0 and report.skipped
