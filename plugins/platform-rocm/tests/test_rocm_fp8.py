"""OCP e4m3fn checkpoints on MI300's e4m3fnuz: bit reinterpretation with an exact dequant."""

from __future__ import annotations

import pytest
import torch

from omni_platform_rocm.fp8 import e4m3fn_to_e4m3fnuz, fp8_formats, platform_fp8


def _quantize_rowwise(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = w.abs().amax(dim=1, keepdim=True) / torch.finfo(torch.float8_e4m3fn).max
    return (w / scale).to(torch.float8_e4m3fn), scale


def test_rocm_e4m3fn_to_fnuz_keeps_dequantized_values_exact() -> None:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(64, 48, generator=gen)
    w[0, :4] = torch.tensor([-0.0, 0.0, 1e-9, -1e-9])  # zeros and values that round to (-)0
    q, scale = _quantize_rowwise(w)
    assert (q.view(torch.int8) == -128).any(), "the test needs negative zeros"
    q_nuz, scale_nuz = e4m3fn_to_e4m3fnuz(q, scale)
    assert q_nuz.dtype == torch.float8_e4m3fnuz
    assert not torch.isnan(q_nuz.float()).any()
    torch.testing.assert_close(q_nuz.float() * scale_nuz, q.float() * scale, atol=0, rtol=0)
    assert torch.finfo(torch.float8_e4m3fnuz).max == 240.0


def test_rocm_converted_weights_feed_scaled_mm() -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(16, 48, generator=gen)
    w = torch.randn(32, 48, generator=gen)
    q, scale = _quantize_rowwise(w)
    q_nuz, scale_nuz = e4m3fn_to_e4m3fnuz(q, scale)
    x_scale = x.abs().amax(dim=1, keepdim=True) / 240.0
    xq = (x / x_scale).to(torch.float8_e4m3fnuz)
    out = torch._scaled_mm(
        xq, q_nuz.t(), scale_a=x_scale, scale_b=scale_nuz.t().contiguous(), out_dtype=torch.float32
    )
    reference = (xq.float() * x_scale) @ (q.float() * scale).t()
    torch.testing.assert_close(out, reference, atol=1e-4, rtol=1e-4)


def test_rocm_conversion_refuses_other_dtypes() -> None:
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        e4m3fn_to_e4m3fnuz(torch.zeros(2, 2), torch.ones(2, 1))


def test_rocm_fp8_tables() -> None:
    assert fp8_formats("gfx942:sramecc+:xnack-") == ("float8_e4m3fnuz", "float8_e5m2fnuz")
    assert fp8_formats("gfx90a") is None
    assert platform_fp8("float8_e4m3fn", "gfx942") == "float8_e4m3fnuz"
    assert platform_fp8("float8_e4m3fnuz", "gfx950") == "float8_e4m3fn"
    assert platform_fp8("float8_e4m3fn", "gfx90a") is None
    with pytest.raises(ValueError, match="not an fp8"):
        platform_fp8("int8", "gfx942")
