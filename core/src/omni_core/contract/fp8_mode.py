"""The fp8 mode: one switch (``Omni(fp8=True)``, ``--fp8``) for fp8 linears and fp8 attention.

Without it a user has to know two settings (``quantization="fp8"`` and an fp8 attention
backend per role) and which roles are worth it. The mode resolves both into the ordinary
configs before anything loads, so the parallel workers, ``omni serve`` and the benchmark see
plain ``AttentionConfig`` / ``QuantizationConfig`` values:

- quantization: :data:`FP8_QUANTIZER` (the core's row-wise fp8 linear) unless the caller named a
  method (``quantization="fp8-rocm"`` on AMD keeps its own);
- attention: on each role the pipeline declares heavy
  (:attr:`~omni_core.contract.registry.PipelineCapabilities.heavy_attention_roles`, by default
  ``self`` and ``joint``), the highest-priority usable backend of precision ``fp8``, unless the
  caller set that role explicitly. The light roles (cross-attention to a few hundred text
  tokens) keep the configured backend: they cost little and fp8 there buys nothing.

No fp8 attention backend usable here is a ConfigError listing each registered one with its
reason, never a silent bf16 run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from omni_core.contract.attention import backend_availability
from omni_core.contract.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.config import AttentionConfig, QuantizationConfig
    from omni_core.contract.platforms import Platform
    from omni_core.contract.registry import AttentionBackendSpec, PipelineSpec, Registry

#: The quantizer the fp8 mode uses when none is named (registered by the core's built-ins).
FP8_QUANTIZER = "fp8"
#: The attention precision the fp8 mode looks for.
FP8_PRECISION = "fp8"


def fp8_attention_backend(registry: Registry, platform: Platform) -> AttentionBackendSpec:
    """The best usable attention backend of precision ``fp8`` here, or a ConfigError saying why
    each registered one cannot run."""
    specs = sorted(
        (s for s in registry.attention_backends.values() if s.precision == FP8_PRECISION),
        key=lambda s: (-s.priority, s.name),
    )
    reasons = []
    for spec in specs:
        availability = backend_availability(spec, platform.device_type)
        if availability.available:
            return spec
        reasons.append(f"{spec.name}: {availability.reason}")
    if not reasons:
        raise ConfigError(
            "fp8: no fp8 attention backend is registered (install an attention plugin that "
            "provides one; `omni list-plugins` shows what is installed)"
        )
    raise ConfigError(
        f"fp8: no fp8 attention backend can run on platform {platform.name!r}: "
        + "; ".join(reasons)
    )


def apply_fp8_mode(
    attention: AttentionConfig,
    quantization: QuantizationConfig,
    spec: PipelineSpec,
    registry: Registry,
    platform: Platform,
) -> tuple[AttentionConfig, QuantizationConfig]:
    """``(attention, quantization)`` with the fp8 mode applied (explicit settings win)."""
    backend = fp8_attention_backend(registry, platform).name
    roles = spec.capabilities.heavy_attention_roles
    attention = attention.with_roles({r: backend for r in roles if attention.override(r) is None})
    if quantization.method is None:
        quantization = quantization.model_copy(update={"method": FP8_QUANTIZER})
    return attention, quantization


__all__ = ["FP8_PRECISION", "FP8_QUANTIZER", "apply_fp8_mode", "fp8_attention_backend"]
