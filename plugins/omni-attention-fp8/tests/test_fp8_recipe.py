"""The fp8 recipe: per-(batch, head) scales and the emulated attention's error, bounded.

The bound (:func:`omni_attention_fp8.testing.fp8_error_bound`) is derived, not fitted: see
that module. That an implementation without fp8 (a bf16 cast) also meets an
upper bound proves nothing, so the tests also require the error to be fp8's: above a quarter of
``u / sqrt(3)`` (the RMS of a uniform rounding error) relative, and at least 4x bf16's.
"""

from __future__ import annotations

import math

import pytest
import torch

from omni_attention_fp8.emulated import fp8_emulated
from omni_attention_fp8.scales import (
    FP8_EPS,
    FP8_MAX,
    O_HEADROOM,
    center_keys,
    compute_scales,
    quantize,
)
from omni_attention_fp8.testing import HALF_SUBNORMAL, exact_attention, fp8_error_bound
from omni_core.runtime import sdpa

U = FP8_EPS


def _inputs(seed: int, heads_gain: tuple[float, ...] = (1.0, 1.0, 1.0)):
    g = torch.Generator().manual_seed(seed)
    b, sq, sk, d = 2, 96, 80, 64
    h = len(heads_gain)
    gain = torch.tensor(heads_gain)[None, None, :, None]
    q = torch.randn(b, sq, h, d, generator=g) * gain
    k = (torch.randn(b, sk, h, d, generator=g) + 2.0) * gain  # an offset centring removes
    v = torch.randn(b, sk, h, d, generator=g) * gain
    return q, k, v


def _rel_rms(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref).norm() / ref.norm())


@pytest.mark.parametrize("seed", [0, 1])
def test_emulated_error_is_within_the_derived_fp8_bound(seed: int) -> None:
    q, k, v = _inputs(seed)
    _, exact = exact_attention(q, k, v, q.shape[-1] ** -0.5)
    out = fp8_emulated(q, k, v)
    error = (out.double() - exact).abs()
    slack = 1e-5 * float(exact.abs().max())  # float32 arithmetic of the emulation
    assert bool((error <= fp8_error_bound(q, k, v) + slack).all())
    # ... and the error is fp8's, not a bf16 cast's: quantization happened
    rel = _rel_rms(out, exact)
    bf16 = _rel_rms(sdpa(q.bfloat16(), k.bfloat16(), v.bfloat16()), exact)
    assert rel > U / math.sqrt(3) / 4, rel
    assert rel > 4 * bf16, (rel, bf16)
    assert rel < 0.1, rel  # the measured band, for the record: about 0.05 here


def test_a_bf16_cast_does_not_look_like_fp8() -> None:
    """The lower bound of the previous test is not met by a bf16 round trip (it is fp8's)."""
    q, k, v = _inputs(0)
    _, exact = exact_attention(q, k, v, q.shape[-1] ** -0.5)
    bf16 = sdpa(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert _rel_rms(bf16, exact) < U / math.sqrt(3) / 4


def test_scales_are_per_batch_and_head() -> None:
    q, k, v = _inputs(2, heads_gain=(1.0, 1e-3, 30.0))
    v[1] *= 5.0  # the second batch's values are larger
    kc = center_keys(k)
    s = compute_scales(q, kc, v)
    assert s.q.shape == s.k.shape == s.v.shape == s.out_descale.shape == (2, 3)
    assert s.qk_descale.shape == (1, 1, 1, 1)
    amax = lambda x: x.abs().amax(dim=(1, 3)).float()  # noqa: E731
    torch.testing.assert_close(s.v, FP8_MAX * O_HEADROOM / amax(v))
    torch.testing.assert_close(s.out_descale * s.v, torch.ones(2, 3))
    # one scalar undoes every head's q*k scale (the kernel takes one descale) ...
    torch.testing.assert_close(s.q * s.k * s.qk_descale.reshape(()), torch.ones(2, 3))
    # ... every head's q and k peak at the same height, none above fp8's range, one at it
    peak_q, peak_k = s.q * amax(q), s.k * amax(kc)
    torch.testing.assert_close(peak_q, peak_k)
    assert bool((peak_q <= FP8_MAX * (1 + 1e-6)).all())
    torch.testing.assert_close(peak_q.max(), torch.tensor(FP8_MAX))
    assert len({round(float(x), 3) for x in s.v.flatten()}) == 6  # six distinct scales


def test_a_head_a_million_times_smaller_keeps_fp8_precision() -> None:
    """Per-head V scales: one scale for the tensor would flush this head's values to zero."""
    q, k, v = _inputs(3, heads_gain=(1.0, 1.0, 1.0))
    v[:, :, 1] *= 1e-6
    _, exact = exact_attention(q, k, v, q.shape[-1] ** -0.5)
    out = fp8_emulated(q, k, v)
    error = (out.double() - exact).abs()
    assert bool((error <= fp8_error_bound(q, k, v) + 1e-5 * exact.abs().amax()).all())
    small = _rel_rms(out[:, :, 1], exact[:, :, 1])
    assert small < 0.1, small
    one_scale = (v * (FP8_MAX / v.abs().amax())).to(torch.float8_e4m3fn).float()
    assert bool((one_scale[:, :, 1] == 0).all())  # what a per-tensor scale would have done


def test_centring_keys_is_exact_for_softmax() -> None:
    q, k, v = _inputs(4)
    kc = center_keys(k)
    torch.testing.assert_close(kc.mean(dim=1), torch.zeros_like(kc.mean(dim=1)), atol=1e-5, rtol=0)
    torch.testing.assert_close(sdpa(q, kc, v), sdpa(q, k, v), atol=1e-5, rtol=1e-5)


def test_quantize_writes_e4m3_and_saturates() -> None:
    x = torch.tensor([[[[1.0, -2.0, 1000.0, 1e-9]]]])  # [1, 1, 1, 4]
    out = quantize(x, torch.tensor([[1.0]]))
    assert out.dtype == torch.float8_e4m3fn and out.is_contiguous()
    assert out.float().tolist() == [[[[1.0, -2.0, FP8_MAX, 0.0]]]]
    grid = torch.linspace(-3, 3, 101)[None, None, None, :]
    q8 = quantize(grid, torch.tensor([[1.0]])).float()
    assert bool(((q8 - grid).abs() <= U * grid.abs() + HALF_SUBNORMAL).all())
    assert len(set(q8.flatten().tolist())) < 101  # a 3-bit mantissa: values collapse


def test_masked_calls_are_exact() -> None:
    q, k, v = _inputs(5)
    mask = torch.rand(2, 1, q.shape[1], k.shape[1], generator=torch.Generator().manual_seed(0))
    mask = mask > 0.3
    torch.testing.assert_close(fp8_emulated(q, k, v, attn_mask=mask), sdpa(q, k, v, attn_mask=mask))
