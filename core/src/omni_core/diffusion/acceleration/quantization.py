"""Quantizers for a denoiser's linear layers, scoped per component.

By default only the ``nn.Linear`` layers inside the repeated transformer blocks are quantized:
never the VAE or text encoders (other components), and never norms, embedders, adaLN modulation
linears or the output projection, whose error shows directly in the output. Methods:

- ``fp8``: our row-wise fp8 linear on ``torch._scaled_mm`` (weights e4m3 per output row at load,
  activations per token at run time). No extra dependency. Pays under ``torch.compile`` (the
  activation quantization fuses into the previous op); eager it is slower than bf16.
- ``torchao-fp8``: torchao ``Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())``.
- ``torchao-int8wo``: torchao ``Int8WeightOnlyConfig()`` (halves weight memory; runs on CPU too).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from omni_core.contract.errors import ConfigError
from omni_core.contract.registry import Availability, Registry

#: Qualified-name fragments never quantized by default.
EXCLUDE = re.compile(
    r"(^|\.)(norm\w*|\w*embed\w*|\w*_mod|modulation|adaln\w*|proj_out|time_\w+)(\.|$)"
)


@dataclass
class QuantReport:
    """What a quantizer did to one component."""

    method: str
    component: str
    linears: int = 0
    skipped: int = 0
    params: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    names: list[str] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "component": self.component,
            "linears": self.linears,
            "skipped": self.skipped,
            "params": self.params,
            "weight_gib_before": round(self.bytes_before / 2**30, 4),
            "weight_gib_after": round(self.bytes_after / 2**30, 4),
        }


def default_filter(block_lists: tuple[str, ...]) -> Callable[[str, Any], bool]:
    """Linears under the repeated-block lists, minus norms/embedders/modulation/output head."""
    import torch

    prefixes = tuple(f"{b}." for b in block_lists)

    def keep(name: str, module: Any) -> bool:
        if not isinstance(module, torch.nn.Linear):
            return False
        if prefixes and not name.startswith(prefixes):
            return False
        if EXCLUDE.search(name):
            return False
        return module.in_features % 16 == 0 and module.out_features % 16 == 0

    return keep


def _tensor_bytes(t: Any) -> int:
    """Storage bytes, looking inside tensor subclasses (torchao) via ``__tensor_flatten__``."""
    flatten = getattr(type(t), "__tensor_flatten__", None)
    if flatten is not None:
        names, _ = t.__tensor_flatten__()
        return sum(_tensor_bytes(getattr(t, n)) for n in names)
    return t.numel() * t.element_size()


def _weight_bytes(module: Any) -> int:
    return sum(_tensor_bytes(p) for p in module.parameters()) + sum(
        _tensor_bytes(b) for b in module.buffers()
    )


# -- our fp8 row-wise linear -----------------------------------------------------------------------
FP8_MAX = 448.0


def _fp8_linear_class() -> type:
    import torch

    class Fp8RowwiseLinear(torch.nn.Module):
        """``y = x W^T + b`` with W in e4m3 (one scale per output row) and x quantized per row."""

        def __init__(self, linear: torch.nn.Linear) -> None:
            super().__init__()
            w = linear.weight.detach()
            scale = w.float().abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / FP8_MAX
            qweight = (w.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
            # column-major [in, out] as _scaled_mm wants its second operand
            self.register_buffer("qweight_t", qweight.t(), persistent=True)
            self.register_buffer(
                "weight_scale", scale.t().contiguous(), persistent=True
            )  # [1, out]
            self.bias = (
                None
                if linear.bias is None
                else torch.nn.Parameter(linear.bias.detach(), requires_grad=False)
            )
            self.in_features, self.out_features = linear.in_features, linear.out_features
            self.out_dtype = w.dtype

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            shape = x.shape
            x2 = x.reshape(-1, shape[-1])
            x_scale = x2.float().abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / FP8_MAX
            xq = (x2.float() / x_scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
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
            return f"in_features={self.in_features}, out_features={self.out_features}, fp8 row-wise"

    return Fp8RowwiseLinear


_FP8_CLASS: type | None = None


def fp8_linear_class() -> type:
    global _FP8_CLASS
    if _FP8_CLASS is None:
        _FP8_CLASS = _fp8_linear_class()
    return _FP8_CLASS


def _replace(root: Any, name: str, new: Any) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, child, new)


# -- quantizer implementations (the ``implementation`` of each QuantizerSpec) ----------------------
class Quantizer:
    """Base: quantize the selected linears of one component in place."""

    name: str = ""

    def quantize(
        self, module: Any, keep: Callable[[str, Any], bool], component: str
    ) -> QuantReport:
        raise NotImplementedError


class Fp8RowwiseQuantizer(Quantizer):
    name = "fp8"

    def quantize(
        self, module: Any, keep: Callable[[str, Any], bool], component: str
    ) -> QuantReport:
        import torch

        report = QuantReport(
            method=self.name, component=component, bytes_before=_weight_bytes(module)
        )
        cls = fp8_linear_class()
        targets = [(n, m) for n, m in module.named_modules() if keep(n, m)]
        report.skipped = sum(
            1
            for n, m in module.named_modules()
            if isinstance(m, torch.nn.Linear) and not keep(n, m)
        )
        with torch.no_grad():
            for name, linear in targets:
                _replace(module, name, cls(linear))
                report.linears += 1
                report.params += linear.weight.numel()
                report.names.append(name)
        report.bytes_after = _weight_bytes(module)
        return report


class TorchaoQuantizer(Quantizer):
    """torchao ``quantize_`` with a config; ``filter_fn`` scopes it to the selected linears."""

    def __init__(self, name: str, make_config: Callable[[], Any]) -> None:
        self.name = name
        self.make_config = make_config

    def quantize(
        self, module: Any, keep: Callable[[str, Any], bool], component: str
    ) -> QuantReport:
        import torch
        from torchao.quantization import quantize_

        report = QuantReport(
            method=self.name, component=component, bytes_before=_weight_bytes(module)
        )
        chosen = {n for n, m in module.named_modules() if keep(n, m)}
        ids = {id(module.get_submodule(n)) for n in chosen}
        report.skipped = sum(
            1
            for n, m in module.named_modules()
            if isinstance(m, torch.nn.Linear) and n not in chosen
        )
        report.linears = len(chosen)
        report.params = sum(module.get_submodule(n).weight.numel() for n in chosen)
        report.names = sorted(chosen)
        quantize_(module, self.make_config(), filter_fn=lambda m, _fqn: id(m) in ids)
        report.bytes_after = _weight_bytes(module)
        return report


def _torchao_fp8_config() -> Any:
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow

    return Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())


def _torchao_int8wo_config() -> Any:
    from torchao.quantization import Int8WeightOnlyConfig

    return Int8WeightOnlyConfig()


fp8 = Fp8RowwiseQuantizer()
torchao_fp8 = TorchaoQuantizer("torchao-fp8", _torchao_fp8_config)
torchao_int8wo = TorchaoQuantizer("torchao-int8wo", _torchao_int8wo_config)


def torchao_available() -> Availability:
    if importlib.util.find_spec("torchao") is None:
        return Availability.no("torchao not installed (pip install torchao)")
    return Availability.yes()


def fp8_available() -> Availability:
    """fp8 matmuls need torch's float8 dtypes and _scaled_mm (CUDA sm89+ for speed; CPU works)."""
    import torch

    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return Availability.no("this torch has no float8 / _scaled_mm")
    if getattr(torch.version, "hip", None):
        # MI300's matrix cores take float8_e4m3fnuz (max 240), not the e4m3fn (max 448) written
        # here: a ROCm platform plugin supplies its own (omni-platform-rocm: fp8-rocm).
        return Availability.no("ROCm build: fp8 format differs on AMD GPUs; use fp8-rocm")
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        if (major, minor) < (8, 9):
            return Availability.no(
                f"fp8 matmuls need compute capability 8.9+, this GPU is {major}.{minor}"
            )
    return Availability.yes()


def torchao_fp8_available() -> Availability:
    have = torchao_available()
    return have if not have.available else fp8_available()


def quantize_components(
    components: dict[str, Any],
    method: str,
    targets: tuple[str, ...],
    *,
    block_lists: dict[str, tuple[str, ...]] | None = None,
    registry: Registry,
    device_type: str | None = None,
) -> list[QuantReport]:
    """Quantize the named ``targets`` among ``components`` with the registered ``method``."""
    from omni_core.contract.registry import load_object

    spec = registry.quantizers.get(method)
    if spec is None:
        known = ", ".join(sorted(registry.quantizers)) or "none"
        raise ConfigError(f"quantization.method: unknown quantizer {method!r}; known: {known}")
    if device_type is not None and device_type not in spec.device_types:
        raise ConfigError(
            f"quantization.method: {method!r} runs on {', '.join(spec.device_types)}, "
            f"not on {device_type}"
        )
    if spec.availability is not None:
        availability = load_object(spec.availability)()
        if not availability.available:
            raise ConfigError(
                f"quantization.method: {method!r} cannot run here: {availability.reason}"
            )
    missing = [t for t in targets if t not in components]
    if missing:
        raise ConfigError(
            f"quantization.components: {', '.join(missing)} not in this pipeline "
            f"(has: {', '.join(sorted(components))})"
        )
    quantizer = spec.load()
    reports = []
    for name in targets:
        module = components[name]
        if module is None:
            continue
        lists = (block_lists or {}).get(name, ())
        reports.append(quantizer.quantize(module, default_filter(lists), name))
    return reports
