"""Test helpers of omni-attention-fp8 (imported by tests only, never by the backends).

:func:`fp8_error_bound` is the elementwise error bound of the fp8 recipe, derived, not fitted.
With e4m3's unit roundoff ``u = 2^-4`` (3 mantissa bits) a
quantized value is ``x (1 + d) + a`` with ``|d| <= u`` and ``|a|`` at most half a subnormal step
(``2^-10``) over the scale. Then, for query row ``i`` of one head:

- each score moves by at most ``D_i = c * max_j sum_d [(2u + u^2)|q||k| + (1 + u)(a_q|k| +
  a_k|q|) + a_q a_k]`` (``c`` the softmax scale, ``k`` centred: the shift is exact);
- scores moved by at most ``D_i`` change every probability by a factor in ``[e^-2D_i, e^2D_i]``;
  rounding the probabilities (scaled by 256) adds a factor ``1 + u`` and at most ``2^-18``;
- rounding v adds ``u |v| + a_v``, rounding the output ``u |o| + a_o``.

So ``|out - o| <= (1 + u)[(e^2D (1 + u)^2 - 1) (p |v|) + e^2D (1 + u) a_v + 2^-18 sum_j ((1 +
u)|v_j| + a_v)] + u |o| + a_o`` elementwise, with ``p`` and ``o`` the exact (float64) ones. A
float32 slack covers the rest."""

from __future__ import annotations

from typing import TYPE_CHECKING

from omni_attention_fp8.scales import FP8_EPS, center_keys, compute_scales

if TYPE_CHECKING:  # pragma: no cover
    import torch

U = FP8_EPS
HALF_SUBNORMAL = 2.0**-10


def exact_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact float64 probabilities [B, H, Sq, Sk] and output [B, Sq, H, D]."""
    import torch

    qd, kd, vd = (t.double().transpose(1, 2) for t in (q, k, v))
    p = torch.softmax(qd @ kd.transpose(-1, -2) * scale, dim=-1)
    return p, (p @ vd).transpose(1, 2)


def fp8_error_bound(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The elementwise error bound of the module docstring, [B, Sq, H, D] float64."""
    import torch

    scale = q.shape[-1] ** -0.5
    kc = center_keys(k)
    s = compute_scales(q, kc, v)
    a_q, a_k, a_v = (HALF_SUBNORMAL / t.double()[:, :, None, None] for t in (s.q, s.k, s.v))
    qa, ka, va = (t.double().abs().transpose(1, 2) for t in (q, kc, v))  # [B, H, S, D]
    cross = qa @ ka.transpose(-1, -2)
    shift = scale * (
        (2 * U + U * U) * cross
        + (1 + U) * (a_q * ka.sum(-1)[:, :, None, :] + a_k * qa.sum(-1)[:, :, :, None])
        + q.shape[-1] * a_q * a_k
    )
    grow = torch.exp(2 * shift.amax(dim=-1, keepdim=True))  # [B, H, Sq, 1]
    p, o = exact_attention(q, k, v, scale)
    weighted = p @ va  # sum_j p_j |v_j|
    floor = 2.0**-18 * ((1 + U) * va.sum(dim=2, keepdim=True) + a_v * v.shape[1])
    before = (grow * (1 + U) ** 2 - 1) * weighted + grow * (1 + U) * a_v + floor
    a_o = HALF_SUBNORMAL / s.v.double()[:, :, None, None]
    bound = (1 + U) * before + U * o.transpose(1, 2).abs() + a_o
    return bound.transpose(1, 2)


__all__ = ["HALF_SUBNORMAL", "exact_attention", "fp8_error_bound"]
