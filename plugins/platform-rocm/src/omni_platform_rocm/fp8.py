"""fp8 on AMD GPUs: which format each architecture's matrix cores take, and converting to it.

MI300 (gfx940/941/942) implements the *FNUZ* fp8 formats (``float8_e4m3fnuz``,
``float8_e5m2fnuz``: exponent bias one higher, no negative zero, a single NaN at 0x80, largest
e4m3 value 240). MI350 (gfx950) and RDNA4 (gfx12) implement the OCP formats that NVIDIA uses
(``float8_e4m3fn``, largest value 448). MI200 and older have no fp8 matmul. Checkpoints quantized
for NVIDIA (e4m3fn) load on MI300 by reinterpreting their bits, see
:func:`e4m3fn_to_e4m3fnuz`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: Architecture -> (e4m3 dtype, e5m2 dtype) its matrix cores take.
FP8_FORMATS: dict[str, tuple[str, str]] = {
    "gfx940": ("float8_e4m3fnuz", "float8_e5m2fnuz"),
    "gfx941": ("float8_e4m3fnuz", "float8_e5m2fnuz"),
    "gfx942": ("float8_e4m3fnuz", "float8_e5m2fnuz"),
    "gfx950": ("float8_e4m3fn", "float8_e5m2"),
    "gfx1200": ("float8_e4m3fn", "float8_e5m2"),
    "gfx1201": ("float8_e4m3fn", "float8_e5m2"),
}

#: Which format family a requested dtype name belongs to.
_E4M3 = ("float8_e4m3fn", "float8_e4m3fnuz")
_E5M2 = ("float8_e5m2", "float8_e5m2fnuz")


def fp8_formats(arch: str | None) -> tuple[str, str] | None:
    """The (e4m3, e5m2) dtype names for ``arch`` (``gfx942:sramecc+:xnack-`` works too)."""
    if not arch:
        return None
    return FP8_FORMATS.get(arch.split(":")[0])


def platform_fp8(requested: str, arch: str | None) -> str | None:
    """The dtype that ``requested`` (any fp8 name) must become on ``arch``; None if no fp8."""
    formats = fp8_formats(arch)
    if formats is None:
        return None
    if requested in _E4M3:
        return formats[0]
    if requested in _E5M2:
        return formats[1]
    raise ValueError(f"{requested!r} is not an fp8 dtype name")


def e4m3fn_to_e4m3fnuz(
    weight: torch.Tensor, scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reinterpret OCP e4m3fn weights as e4m3fnuz for MI300, keeping ``weight * scale`` exact.

    The same bits read as FNUZ are worth half (exponent bias 8 instead of 7), so the scale
    doubles. The one bit pattern that differs in meaning, 0x80 (negative zero in e4m3fn, NaN in
    FNUZ), becomes 0x00. No copy of the weight beyond that fix-up; runs once at load time.
    """
    import torch

    if weight.dtype != torch.float8_e4m3fn:
        raise TypeError(f"expected float8_e4m3fn weights, got {weight.dtype}")
    bits = weight.view(torch.int8)
    bits = torch.where(bits == -128, torch.zeros_like(bits), bits)
    return bits.view(torch.float8_e4m3fnuz), scale * 2.0
