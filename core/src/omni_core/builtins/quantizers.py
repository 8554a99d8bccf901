"""Built-in quantizers: our fp8 row-wise linear and torchao's fp8 / int8 weight-only.

All are scoped per component (the denoiser's block linears by default; never the VAE, norms,
embedders, modulation or output head); see :mod:`omni_core.diffusion.acceleration.quantization`.
"""

from __future__ import annotations

from collections.abc import Callable

from omni_core import PLUGIN_API_VERSION, QuantizerSpec, hookimpl

OMNI_PLUGIN_API = PLUGIN_API_VERSION

_IMPL = "omni_core.diffusion.acceleration.quantization"


@hookimpl
def omni_register_quantizers(register: Callable[[QuantizerSpec], None]) -> None:
    register(
        QuantizerSpec(
            name="fp8",
            implementation=f"{_IMPL}:fp8",
            device_types=("cuda", "cpu"),
            availability=f"{_IMPL}:fp8_available",
            description="fp8 e4m3 row-wise weights and per-token activations on torch._scaled_mm "
            "(no extra dependency; pays when compiled).",
        )
    )
    register(
        QuantizerSpec(
            name="torchao-fp8",
            implementation=f"{_IMPL}:torchao_fp8",
            device_types=("cuda",),
            availability=f"{_IMPL}:torchao_fp8_available",
            description="torchao Float8DynamicActivationFloat8Weight, per-row scales.",
        )
    )
    register(
        QuantizerSpec(
            name="torchao-int8wo",
            implementation=f"{_IMPL}:torchao_int8wo",
            device_types=("cuda", "cpu"),
            availability=f"{_IMPL}:torchao_available",
            description="torchao int8 weight-only: half the weight memory of bf16.",
        )
    )
