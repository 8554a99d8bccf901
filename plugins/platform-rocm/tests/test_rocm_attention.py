"""aiter / flash-attn-ck against SDPA on CPU through a stand-in of flash_attn_func."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F

from omni_core.testing import (
    attention_router,
    backend_availability,
    dispatch_attention,
    use_router,
)
from omni_platform_rocm import attention
from omni_platform_rocm.platform import RocmPlatform
from omni_platform_rocm.testing import install_kernel_modules, reference_flash_attn_func

B, SQ, SKV, H, D = 2, 20, 33, 4, 64
BACKENDS = {"aiter": attention.aiter_attention, "flash-attn-ck": attention.flash_attn_ck}
MODULE_OF = {"aiter": "aiter", "flash-attn-ck": "flash_attn"}


def sdpa_reference(q, k, v, attn_mask=None, scale=None):
    out = F.scaled_dot_product_attention(
        q.float().transpose(1, 2),
        k.float().transpose(1, 2),
        v.float().transpose(1, 2),
        attn_mask=attn_mask,
        scale=scale,
    )
    return out.transpose(1, 2)


@pytest.fixture
def qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.randn(B, s, H, D, generator=gen).to(torch.bfloat16) for s in (SQ, SKV, SKV))


@pytest.fixture
def kernel_calls(monkeypatch):
    """Stand-in aiter and flash_attn modules whose kernel calls are recorded."""
    calls: list[tuple[str, dict]] = []
    modules = install_kernel_modules(monkeypatch)
    for name, module in modules.items():

        def spy(*args, _name=name, **kwargs):
            calls.append((_name, kwargs))
            return reference_flash_attn_func(*args, **kwargs)

        monkeypatch.setattr(module, "flash_attn_func", spy)
    return calls


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("scale", [None, 0.07])
def test_rocm_backend_matches_sdpa(backend: str, scale, qkv, kernel_calls) -> None:
    q, k, v = qkv
    out = BACKENDS[backend](q, k, v, scale=scale)
    assert out.shape == q.shape and out.dtype == q.dtype
    expected = sdpa_reference(q, k, v, scale=scale)
    torch.testing.assert_close(out.float(), expected, atol=2e-2, rtol=2e-2)
    assert [name for name, _ in kernel_calls] == [MODULE_OF[backend]]
    kwargs = kernel_calls[0][1]
    assert kwargs["dropout_p"] == 0.0 and kwargs["causal"] is False
    assert kwargs["softmax_scale"] == pytest.approx(scale if scale is not None else D**-0.5)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_rocm_masked_and_fp32_calls_run_on_sdpa(backend: str, qkv, kernel_calls) -> None:
    q, k, v = qkv
    keep = torch.ones(B, 1, 1, SKV, dtype=torch.bool)
    keep[0, ..., 25:] = False
    out = BACKENDS[backend](q, k, v, attn_mask=keep)
    torch.testing.assert_close(
        out.float(), sdpa_reference(q, k, v, attn_mask=keep), atol=2e-2, rtol=2e-2
    )
    q32, k32, v32 = (t.float() for t in qkv)
    out32 = BACKENDS[backend](q32, k32, v32)
    torch.testing.assert_close(out32, sdpa_reference(q32, k32, v32), atol=1e-5, rtol=1e-5)
    assert kernel_calls == []


def test_rocm_stand_in_kernel_is_faithful(qkv) -> None:
    q, k, v = qkv
    with pytest.raises(TypeError, match="fp16 and bf16"):
        reference_flash_attn_func(q.float(), k.float(), v.float())
    with pytest.raises(ValueError, match="divide"):
        reference_flash_attn_func(q, k[:, :, :3], v[:, :, :3])
    # GQA: 2 kv heads serve 4 query heads, as repeat_interleave would.
    out = reference_flash_attn_func(q, k[:, :, :2], v[:, :, :2])
    expected = sdpa_reference(
        q, k[:, :, :2].repeat_interleave(2, dim=2), v[:, :, :2].repeat_interleave(2, dim=2)
    )
    torch.testing.assert_close(out.float(), expected, atol=2e-2, rtol=2e-2)


def test_rocm_router_prefers_aiter_then_ck_then_sdpa(
    rocm_host, mi300, kernel_calls, monkeypatch, qkv
) -> None:
    platform = RocmPlatform()
    router = attention_router(rocm_host.registry, platform)
    assert set(router.names.values()) == {"aiter"}
    q, k, v = qkv
    with use_router(router):
        out = dispatch_attention(q, k, v, role="joint")
    torch.testing.assert_close(out.float(), sdpa_reference(q, k, v), atol=2e-2, rtol=2e-2)
    assert [name for name, _ in kernel_calls] == ["aiter"]

    monkeypatch.setitem(sys.modules, "aiter", None)  # aiter not installed
    router = attention_router(rocm_host.registry, platform)
    assert set(router.names.values()) == {"flash-attn-ck"}

    monkeypatch.setitem(sys.modules, "flash_attn", None)
    router = attention_router(rocm_host.registry, platform)
    assert set(router.names.values()) == {"sdpa"}


def test_rocm_backend_availability_says_why(rocm_host, no_hip, monkeypatch) -> None:
    spec = rocm_host.registry.attention_backends["aiter"]
    assert "runs on cuda, not on cpu" in backend_availability(spec, "cpu").reason
    assert "needs a ROCm (HIP) build" in backend_availability(spec, "cuda").reason
    monkeypatch.setattr(torch.version, "hip", "6.4.1", raising=False)
    monkeypatch.setitem(sys.modules, "aiter", None)
    assert "aiter is not installed" in backend_availability(spec, "cuda").reason
    ck = rocm_host.registry.attention_backends["flash-attn-ck"]
    monkeypatch.setitem(sys.modules, "flash_attn", None)
    assert "flash_attn is not installed" in backend_availability(ck, "cuda").reason
