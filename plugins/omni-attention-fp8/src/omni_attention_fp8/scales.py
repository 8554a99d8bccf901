"""The fp8 recipe both backends share: per-(batch, head) scales, computed on the device.

cuDNN's fp8 attention on Hopper takes one descale per tensor and writes its output in fp8, so
per-(batch, head) scales are realised by folding them into the tensors, exactly:

- V: each (batch, head) is scaled to ``FP8_MAX * O_HEADROOM`` of its own peak. The output of a
  head is a convex combination of its value rows, so it then also fits fp8 (the headroom covers
  the rounding of the probabilities) and is quantized at full range per head; the per-head
  factor is undone on the output (:attr:`Fp8Scales.out_descale`).
- Q and K: the kernel multiplies ``QK^T`` by one scalar, so every head's ``sq * sk`` must be the
  same ``C``. ``C`` is the largest value no head overflows with, and each head splits it so that
  its quantized q and k peak at the same height (maximising the smaller headroom): never less
  range than one scale per tensor, usually more. The kernel's descale is ``1 / C``.
- K is first centred over the sequence (``k - mean(k)``, as SageAttention does): softmax does not
  change when a row of scores shifts by a constant, so this is exact, and it removes the shared
  channel offsets that would otherwise take fp8's range.
- The probabilities are quantized with :data:`P_SCALE` (they lie in (0, 1]).

Nothing here reads a value on the host: scales are tensors, so a step never waits on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: Largest finite float8_e4m3fn.
FP8_MAX = 448.0
#: e4m3's unit roundoff (3 mantissa bits): a rounded normal number is off by at most this share.
FP8_EPS = 2.0**-4
#: Scale of the softmax probabilities (in (0, 1]) before their fp8 cast: e4m3's largest power of
#: two, so the descale is exact.
P_SCALE = 256.0
#: V peaks at this share of FP8_MAX, so the output (a convex combination of V rows, its
#: probabilities rounded up by at most FP8_EPS) stays finite in fp8.
O_HEADROOM = 0.875
#: Smallest peak a head's amax is taken as (an all-zero head must not divide by zero).
AMAX_FLOOR = 1e-8


@dataclass(frozen=True)
class Fp8Scales:
    """Scales of one attention call, all device tensors: ``[batch, heads]`` unless noted."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    #: ``1 / C`` as a ``[1, 1, 1, 1]`` float32 tensor: the kernel's descale of ``QK^T``.
    qk_descale: torch.Tensor
    #: What multiplies the fp8 output of a head to give attention's output (``1 / v``).
    out_descale: torch.Tensor


def head_amax(x: torch.Tensor) -> torch.Tensor:
    """``max |x|`` per (batch, head) of a ``[batch, seq, heads, dim]`` tensor, float32."""
    return x.abs().amax(dim=(1, 3)).float().clamp_min(AMAX_FLOOR)


def center_keys(k: torch.Tensor) -> torch.Tensor:
    """``k`` minus its mean over the sequence, per (batch, head, channel), in float32.

    Exact for unmasked softmax attention: every score of a query row moves by the same
    ``q . mean(k)``.
    """
    kf = k.float()
    return kf - kf.mean(dim=1, keepdim=True)


def compute_scales(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Fp8Scales:
    """The scales of :func:`quantize` for ``q``, (centred) ``k`` and ``v``, ``[B, S, H, D]``."""
    import torch

    aq, ak, av = head_amax(q), head_amax(k), head_amax(v)
    c = (FP8_MAX / aq * (FP8_MAX / ak)).amin()  # every head fits: c * aq * ak <= FP8_MAX^2
    peak = torch.sqrt(c * aq * ak)  # each head's q and k peak here (<= FP8_MAX)
    v_scale = (FP8_MAX * O_HEADROOM) / av
    return Fp8Scales(
        q=peak / aq,
        k=peak / ak,
        v=v_scale,
        qk_descale=(1.0 / c).reshape(1, 1, 1, 1),
        out_descale=1.0 / v_scale,
    )


def quantize(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x * scale`` per (batch, head) as contiguous float8_e4m3fn ``[B, S, H, D]`` (saturating:
    a value rounded just past FP8_MAX stays finite)."""
    import torch

    scaled = x.float() * scale[:, None, :, None]
    return scaled.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).contiguous()


def valid_keys_first(
    keep: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(k, v, lengths)`` with each batch row's kept keys moved first (in their order) and how
    many there are (int32 ``[B, 1, 1, 1]``): softmax over a set of keys does not depend on their
    order, so attention with a key-padding mask ``keep`` (bool ``[B, keys]``) equals attention
    over the first ``lengths`` keys. On the device, no host sync."""
    import torch

    order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)
    index = order[:, :, None, None]
    k = k.gather(1, index.expand(-1, -1, k.shape[2], k.shape[3]))
    v = v.gather(1, index.expand(-1, -1, v.shape[2], v.shape[3]))
    return k, v, keep.sum(dim=1).to(torch.int32).reshape(-1, 1, 1, 1)


def dequantize_output(out8: torch.Tensor, scales: Fp8Scales, dtype: torch.dtype) -> torch.Tensor:
    """The fp8 output ``[B, S, H, D]`` of a call back in ``dtype``, per-head scale undone."""
    return (out8.float() * scales.out_descale[:, None, :, None]).to(dtype)


__all__ = [
    "AMAX_FLOOR",
    "FP8_EPS",
    "FP8_MAX",
    "O_HEADROOM",
    "P_SCALE",
    "Fp8Scales",
    "center_keys",
    "compute_scales",
    "dequantize_output",
    "head_amax",
    "quantize",
    "valid_keys_first",
]
