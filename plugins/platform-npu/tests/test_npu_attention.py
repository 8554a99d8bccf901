"""The npu-fusion backend against SDPA on CPU, through a faithful stand-in of the fused kernel."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from omni_core.testing import (
    attention_router,
    backend_availability,
    dispatch_attention,
    use_router,
)
from omni_platform_npu import attention, testing
from omni_platform_npu.platform import NpuPlatform

B, SQ, SKV, H, D = 2, 24, 40, 4, 32


def _float_unless_bool(mask: torch.Tensor) -> torch.Tensor:
    return mask if mask.dtype == torch.bool else mask.float()


def sdpa_reference(q, k, v, attn_mask=None, scale=None):
    """Float32 SDPA over [B, S, H, D] on the same (low-precision) inputs."""
    out = F.scaled_dot_product_attention(
        q.float().transpose(1, 2),
        k.float().transpose(1, 2),
        v.float().transpose(1, 2),
        attn_mask=None if attn_mask is None else _float_unless_bool(attn_mask),
        scale=scale,
    )
    return out.transpose(1, 2)


@pytest.fixture
def qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(B, SQ, H, D, generator=gen).to(torch.bfloat16)
    k = torch.randn(B, SKV, H, D, generator=gen).to(torch.bfloat16)
    v = torch.randn(B, SKV, H, D, generator=gen).to(torch.bfloat16)
    return q, k, v


@pytest.fixture
def kernel_calls(npu_runtime, monkeypatch):
    """Count calls reaching the (stand-in) fused kernel."""
    import torch_npu

    calls: list[dict] = []
    real = torch_npu.npu_fusion_attention

    def spy(*args, **kwargs):
        calls.append({"layout": args[4], "head_num": args[3], **kwargs})
        return real(*args, **kwargs)

    monkeypatch.setattr(torch_npu, "npu_fusion_attention", spy)
    return calls


def _masks() -> dict[str, torch.Tensor | None]:
    gen = torch.Generator().manual_seed(1)
    keep = torch.ones(B, SKV, dtype=torch.bool)
    keep[1, 29:] = False  # padding at the end of the second sample
    per_head = torch.rand(1, H, SQ, SKV, generator=gen) > 0.3
    per_head[..., 0] = True  # every row attends somewhere
    additive = torch.randn(B, 1, SQ, SKV, generator=gen)
    additive[0, :, :, 5:9] = float("-inf")
    return {
        "none": None,
        "key-padding [B,1,1,Skv]": keep[:, None, None, :],
        "2-d [Sq,Skv]": torch.rand(SQ, SKV, generator=gen) > 0.2,
        "per-head [1,H,Sq,Skv]": per_head,
        "3-d [H,Sq,Skv]": per_head[0],
        "additive [B,1,Sq,Skv]": additive.to(torch.bfloat16),
        "additive 2-d": torch.randn(SQ, SKV, generator=gen).to(torch.bfloat16),
    }


MASKS = _masks()
for _m in ("2-d [Sq,Skv]",):
    MASKS[_m][:, 0] = True


@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("scale", [None, 0.05])
def test_npu_fusion_matches_sdpa(qkv, kernel_calls, mask_name: str, scale: float | None) -> None:
    q, k, v = qkv
    mask = MASKS[mask_name]
    out = attention.npu_fusion(q, k, v, attn_mask=mask, scale=scale)
    expected = sdpa_reference(q, k, v, attn_mask=mask, scale=scale)
    assert out.shape == q.shape and out.dtype == q.dtype
    torch.testing.assert_close(out.float(), expected, atol=2e-2, rtol=2e-2)
    assert len(kernel_calls) == 1, "the fused kernel must have run"
    call = kernel_calls[0]
    assert call["layout"] == "BSND" and call["head_num"] == H
    assert call["keep_prob"] == 1.0
    assert call["scale"] == pytest.approx(scale if scale is not None else D**-0.5)


def test_npu_mask_conversion_inverts_and_uses_kernel_shapes() -> None:
    keep = torch.tensor([[True, True, False]])  # [Sq=1, Skv=3] in SDPA's convention
    atten_mask, pse = attention.to_fusion_masks(
        keep, batch=2, heads=4, seq_q=1, seq_kv=3, scale=0.5, dtype=torch.float16
    )
    assert pse is None
    assert atten_mask.shape == (1, 1, 1, 3)
    assert atten_mask.tolist() == [[[[False, False, True]]]]  # True = masked out
    per_head = torch.ones(1, 4, 1, 3, dtype=torch.bool)
    atten_mask, _ = attention.to_fusion_masks(
        per_head, batch=2, heads=4, seq_q=1, seq_kv=3, scale=0.5, dtype=torch.float16
    )
    assert atten_mask.shape == (2, 4, 1, 3)  # 1NSS is no kernel shape: batch expanded
    bias = torch.tensor([[0.0, -1.0, float("-inf")]])
    atten_mask, pse = attention.to_fusion_masks(
        bias, batch=2, heads=4, seq_q=1, seq_kv=3, scale=0.5, dtype=torch.float16
    )
    assert atten_mask is None
    assert pse.shape == (1, 4, 1, 3) and pse.dtype == torch.float16
    assert pse[0, 0].tolist() == [[0.0, -2.0, float("-inf")]]  # divided by scale
    with pytest.raises(ValueError, match="does not broadcast"):
        attention.to_fusion_masks(
            torch.ones(3, 1, 1, 3, dtype=torch.bool),
            batch=2,
            heads=4,
            seq_q=1,
            seq_kv=3,
            scale=0.5,
            dtype=torch.float16,
        )


def test_npu_stand_in_is_faithful(qkv, npu_runtime) -> None:
    """The stand-in rejects what the real kernel rejects, and its mask means 'masked out'."""
    q, k, v = qkv
    ref = testing.reference_fusion_attention
    plain = ref(q, k, v, H, "BSND", scale=D**-0.5)[0]
    nothing_masked = torch.zeros(SQ, SKV, dtype=torch.bool)
    masked = ref(q, k, v, H, "BSND", atten_mask=nothing_masked, scale=D**-0.5)[0]
    torch.testing.assert_close(masked, plain)
    bnsd = ref(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), H, "BNSD", scale=D**-0.5)[0]
    torch.testing.assert_close(bnsd.transpose(1, 2), plain)
    bsh = ref(q.flatten(2), k.flatten(2), v.flatten(2), H, "BSH", scale=D**-0.5)[0]
    torch.testing.assert_close(bsh.view(B, SQ, H, D), plain)
    with pytest.raises(ValueError, match="BNSS, B1SS, 11SS or SS"):
        ref(q, k, v, H, "BSND", atten_mask=torch.zeros(1, H, SQ, SKV, dtype=torch.bool))
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        ref(q.float(), k.float(), v.float(), H, "BSND")
    with pytest.raises(ValueError, match="head_num"):
        ref(q, k, v, H * 2, "BSND")


def test_npu_fusion_falls_back_to_sdpa_where_the_kernel_cannot_run(qkv, kernel_calls) -> None:
    q, k, v = (t.float() for t in qkv)
    out = attention.npu_fusion(q, k, v)
    torch.testing.assert_close(out, sdpa_reference(q, k, v), atol=1e-5, rtol=1e-5)
    odd = torch.randn(1, 8, 2, 24, dtype=torch.bfloat16)  # head dim 24: not a multiple of 16
    attention.npu_fusion(odd, odd, odd)
    assert kernel_calls == []


def test_npu_router_picks_npu_fusion_and_dispatches(npu_host, qkv, kernel_calls) -> None:
    platform = NpuPlatform()
    router = attention_router(npu_host.registry, platform)
    assert router.names == {"self": "npu-fusion", "cross": "npu-fusion", "joint": "npu-fusion"}
    q, k, v = qkv
    with use_router(router):
        out = dispatch_attention(q, k, v, role="cross", attn_mask=MASKS["key-padding [B,1,1,Skv]"])
    expected = sdpa_reference(q, k, v, attn_mask=MASKS["key-padding [B,1,1,Skv]"])
    torch.testing.assert_close(out.float(), expected, atol=2e-2, rtol=2e-2)
    assert len(kernel_calls) == 1


def test_npu_fusion_availability(npu_host, no_torch_npu) -> None:
    spec = npu_host.registry.attention_backends["npu-fusion"]
    on_cpu = backend_availability(spec, "cpu")
    assert not on_cpu.available and "runs on npu" in on_cpu.reason
    on_npu = backend_availability(spec, "npu")
    assert not on_npu.available and "torch_npu is not installed" in on_npu.reason
