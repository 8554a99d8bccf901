"""Lossy attention never comes from ``auto``; the fp8 mode resolves into plain configs.

The backends here come from a third-party-style plugin object registered into an isolated host
(the kernels are the core's own SDPA, so nothing but the spec fields differs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from omni_core import AttentionBackendSpec, ConfigError, PipelineSpec, hookimpl
from omni_core.contract.config import AttentionConfig, QuantizationConfig
from omni_core.contract.fp8_mode import apply_fp8_mode, fp8_attention_backend
from omni_core.contract.platforms import CpuPlatform, CudaPlatform
from omni_core.contract.registry import PipelineCapabilities, Registry
from omni_core.testing import attention_router, isolated_host, register_plugin

SDPA = "omni_core.runtime.kernels.sdpa:sdpa"
NEVER = "omni_core.runtime.kernels.sdpa:flash_available"  # a real check, False on a CPU torch


class LossyKernels:
    """Two fp8 backends that would win ``auto`` on priority alone, and one exact one."""

    @hookimpl
    def omni_register_attention_backends(
        self, register: Callable[[AttentionBackendSpec], None]
    ) -> None:
        common = {"implementation": SDPA, "lossy": True, "precision": "fp8"}
        register(
            AttentionBackendSpec(name="fp8-top", device_types=("cpu",), priority=999, **common)
        )
        register(
            AttentionBackendSpec(name="fp8-gpu", device_types=("cuda",), priority=1000, **common)
        )
        register(
            AttentionBackendSpec(
                name="exact-top", implementation=SDPA, device_types=("cpu",), priority=998
            )
        )


@pytest.fixture
def lossy_registry() -> Iterator[Registry]:
    with isolated_host() as host:
        yield register_plugin(host, LossyKernels(), "lossy-kernels")


class NoPreference(CpuPlatform):
    """A CPU platform without preferred backends: ``auto`` goes by priority alone."""

    preferred_attention_backends = ()


def _spec(**capabilities: object) -> PipelineSpec:
    return PipelineSpec(
        name="probe",
        implementation="omni_core.api:Omni",
        tasks=("t2i",),
        capabilities=PipelineCapabilities(**capabilities),
    )


def test_auto_never_picks_a_lossy_backend_whatever_its_priority(lossy_registry) -> None:
    router = attention_router(lossy_registry, NoPreference())
    assert set(router.names.values()) == {"exact-top"}  # 998 beats sdpa-auto, 999 is lossy
    named = attention_router(lossy_registry, NoPreference(), self="fp8-top")
    assert named.names == {"self": "fp8-top", "cross": "exact-top", "joint": "exact-top"}


def test_fp8_backend_is_the_best_usable_one_or_every_reason(lossy_registry) -> None:
    assert fp8_attention_backend(lossy_registry, CpuPlatform()).name == "fp8-top"
    gpu = lossy_registry.attention_backends["fp8-gpu"]
    lossy_registry.specs["attention_backends"]["fp8-gpu"] = gpu.model_copy(
        update={"availability": NEVER}
    )
    with pytest.raises(ConfigError) as excinfo:
        fp8_attention_backend(lossy_registry, CudaPlatform())
    message = str(excinfo.value)
    assert message.startswith("fp8: no fp8 attention backend can run on platform 'cuda': ")
    assert "fp8-gpu: " in message and "fp8-top: runs on cpu, not on cuda" in message


def test_fp8_without_any_fp8_backend_says_so(omni_host) -> None:
    with pytest.raises(ConfigError, match="no fp8 attention backend is registered"):
        fp8_attention_backend(omni_host.registry, CpuPlatform())


def test_fp8_mode_sets_heavy_roles_and_the_fp8_quantizer(lossy_registry) -> None:
    assert PipelineCapabilities().heavy_attention_roles == ("self", "joint")
    attention, quantization = apply_fp8_mode(
        AttentionConfig(), QuantizationConfig(), _spec(), lossy_registry, CpuPlatform()
    )
    assert attention.for_role("self") == attention.for_role("joint") == "fp8-top"
    assert attention.for_role("cross") == "auto"  # short text keys stay exact
    assert quantization.method == "fp8"
    router = attention_router(lossy_registry, NoPreference(), **attention.model_dump(by_alias=True))
    assert router.names == {"self": "fp8-top", "cross": "exact-top", "joint": "fp8-top"}


def test_fp8_mode_keeps_what_the_caller_set(lossy_registry) -> None:
    attention, quantization = apply_fp8_mode(
        AttentionConfig(backend="sdpa", self="sdpa-math"),
        QuantizationConfig(method="torchao-fp8"),
        _spec(heavy_attention_roles=("self", "cross")),
        lossy_registry,
        CpuPlatform(),
    )
    assert (attention.for_role("self"), attention.for_role("cross")) == ("sdpa-math", "fp8-top")
    assert attention.for_role("joint") == "sdpa"
    assert quantization.method == "torchao-fp8"
