"""``fp8-rocm``: row-wise fp8 linears in the format the AMD GPU's matrix cores take.

omni-core's ``fp8`` quantizer writes OCP ``float8_e4m3fn`` (NVIDIA's format, largest value 448).
MI300 (gfx942) multiplies only the FNUZ formats (``float8_e4m3fnuz``, largest value 240), so a
quantizer for ROCm must pick the dtype *and* its range from the GPU: this one asks the platform
data (:mod:`omni_platform_rocm.fp8`) for the architecture's e4m3 format and scales to that
format's own maximum. Weights get one scale per output row at load time; activations one scale
per token at run time; the matmul is ``torch._scaled_mm`` (hipBLASLt on ROCm). Lossy: the
quality cost is what :mod:`omni_core.diffusion.acceleration.quality` reports for any quantizer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omni_core import Availability, ConfigError
from omni_core.diffusion import QuantReport
from omni_platform_rocm import detect
from omni_platform_rocm.fp8 import fp8_formats

_LINEAR_CLASS: type | None = None


def fp8_linear_class() -> type:
    """The fp8 linear module class (built on first use so importing this module is torch-free)."""
    global _LINEAR_CLASS
    if _LINEAR_CLASS is not None:
        return _LINEAR_CLASS
    import torch

    class RocmFp8Linear(torch.nn.Module):
        """``y = x W^T + b`` with W and x in one fp8 format, scaled per row into its range."""

        def __init__(self, linear: torch.nn.Linear, fp8_dtype: torch.dtype) -> None:
            super().__init__()
            self.fp8_dtype = fp8_dtype
            self.fp8_max = float(torch.finfo(fp8_dtype).max)
            w = linear.weight.detach().float()
            scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / self.fp8_max
            qweight = (w / scale).clamp(-self.fp8_max, self.fp8_max).to(fp8_dtype)
            # _scaled_mm wants its second operand column-major: keep W^T as a view of W.
            self.register_buffer("qweight_t", qweight.t())
            self.register_buffer("weight_scale", scale.t().contiguous())  # [1, out]
            self.bias = (
                None
                if linear.bias is None
                else torch.nn.Parameter(linear.bias.detach(), requires_grad=False)
            )
            self.in_features, self.out_features = linear.in_features, linear.out_features
            self.out_dtype = linear.weight.dtype

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            shape = x.shape
            rows = x.reshape(-1, shape[-1]).float()
            x_scale = rows.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / self.fp8_max
            xq = (rows / x_scale).clamp(-self.fp8_max, self.fp8_max).to(self.fp8_dtype)
            out = torch._scaled_mm(
                xq,
                self.qweight_t,
                scale_a=x_scale,
                scale_b=self.weight_scale,
                bias=None if self.bias is None else self.bias.to(self.out_dtype),
                out_dtype=self.out_dtype,
            )
            return out.reshape(*shape[:-1], self.out_features)

        def extra_repr(self) -> str:
            return (
                f"in_features={self.in_features}, out_features={self.out_features}, "
                f"{str(self.fp8_dtype).removeprefix('torch.')} row-wise"
            )

    _LINEAR_CLASS = RocmFp8Linear
    return _LINEAR_CLASS


def arch_fp8_dtype() -> str:
    """The e4m3 format of the first visible AMD GPU, or a ConfigError saying why there is none."""
    gpus = detect.visible_gpus()
    if not gpus:
        raise ConfigError("quantization.method: 'fp8-rocm' found no visible AMD GPU")
    formats = fp8_formats(gpus[0].arch)
    if formats is None:
        raise ConfigError(
            f"quantization.method: 'fp8-rocm' needs fp8 matrix cores; {gpus[0].arch} has none "
            "(MI300 / gfx942 or newer)"
        )
    return formats[0]


class RocmFp8Quantizer:
    """Quantize the selected linears of one component in place (omni's Quantizer protocol)."""

    name = "fp8-rocm"

    def __init__(self, fp8_dtype: str | None = None) -> None:
        #: Fixed format (tests, offline conversion); None asks the visible GPU.
        self.fp8_dtype = fp8_dtype

    def quantize(
        self, module: Any, keep: Callable[[str, Any], bool], component: str
    ) -> QuantReport:
        import torch

        dtype = getattr(torch, self.fp8_dtype or arch_fp8_dtype())
        cls = fp8_linear_class()
        report = QuantReport(method=self.name, component=component)
        linears = [(n, m) for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)]
        report.bytes_before = _weight_bytes(module)
        with torch.no_grad():
            for name, linear in linears:
                if not keep(name, linear):
                    report.skipped += 1
                    continue
                parent_name, _, child = name.rpartition(".")
                parent = module.get_submodule(parent_name) if parent_name else module
                setattr(parent, child, cls(linear, dtype))
                report.linears += 1
                report.params += linear.weight.numel()
                report.names.append(name)
        report.bytes_after = _weight_bytes(module)
        return report


def _weight_bytes(module: Any) -> int:
    tensors = [*module.parameters(), *module.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


fp8_rocm = RocmFp8Quantizer()


def fp8_rocm_available() -> Availability:
    """Usable on a ROCm build whose first visible GPU has fp8 matrix cores."""
    if detect.hip_version() is None:
        return Availability.no("needs a ROCm (HIP) build of torch")
    try:
        dtype = arch_fp8_dtype()
    except ConfigError as exc:
        return Availability.no(str(exc).removeprefix("quantization.method: "))
    return Availability.yes(f"{dtype} on {detect.visible_gpus()[0].arch}")
