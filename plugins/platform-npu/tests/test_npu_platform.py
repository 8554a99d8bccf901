"""Selection against the built-ins, OMNI_PLATFORM, env defaults, the Platform API via torch.npu."""

from __future__ import annotations

import os

import pytest

from omni_core import ConfigError, PlatformError
from omni_core.testing import current_platform, select_platform
from omni_platform_npu.platform import NpuPlatform


def test_npu_spec_registered_with_compat_row(npu_host) -> None:
    spec = npu_host.registry.platforms["npu"]
    assert spec.plugin == "omni-platform-npu"
    assert spec.device_type == "npu"
    assert spec.priority > npu_host.registry.platforms["cuda"].priority
    assert spec.compatibility["omni-core"] == ">=0.3,<0.4"
    assert spec.compatibility["torch-npu"] == ">=2.5.1"
    assert spec.compatibility["torch"] == ">=2.5"


def test_npu_selected_over_builtins_when_present(npu_host, npu_runtime, clean_env) -> None:
    selection = select_platform(npu_host.registry)
    assert selection.spec.name == "npu"
    assert isinstance(selection.platform, NpuPlatform)
    assert "highest-priority" in selection.reason


def test_npu_absent_falls_back_to_cpu_and_says_why(npu_host, no_torch_npu, clean_env) -> None:
    selection = select_platform(npu_host.registry)
    assert selection.spec.name == "cpu"
    assert "npu: torch_npu is not installed" in selection.reason


def test_npu_forced_with_omni_platform(npu_host, npu_runtime, clean_env, monkeypatch) -> None:
    monkeypatch.setenv("OMNI_PLATFORM", "cpu")
    assert select_platform(npu_host.registry).spec.name == "cpu"
    monkeypatch.setenv("OMNI_PLATFORM", "npu")
    selection = select_platform(npu_host.registry)
    assert selection.spec.name == "npu"
    assert selection.reason == "forced by OMNI_PLATFORM=npu"


def test_npu_forced_but_unavailable_is_a_clear_error(
    npu_host, no_torch_npu, clean_env, monkeypatch
) -> None:
    monkeypatch.setenv("OMNI_PLATFORM", "npu")
    with pytest.raises(PlatformError) as excinfo:
        select_platform(npu_host.registry)
    message = str(excinfo.value)
    assert "'npu'" in message and "not available" in message
    assert "torch_npu is not installed" in message
    assert "\n" not in message


def test_npu_env_defaults_applied_only_when_selected(npu_host, clean_env, npu_runtime) -> None:
    os.environ["TASK_QUEUE_ENABLE"] = "1"  # the user's value wins over the default
    platform = current_platform()
    assert platform.name == "npu"
    assert os.environ["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    assert os.environ["CPU_AFFINITY_CONF"] == "1"
    assert os.environ["TASK_QUEUE_ENABLE"] == "1"


def test_npu_env_defaults_untouched_when_not_selected(npu_host, clean_env, no_torch_npu) -> None:
    assert current_platform().name == "cpu"
    for key in NpuPlatform.env_defaults:
        assert key not in os.environ


def test_npu_platform_api_goes_through_torch_npu(npu_runtime) -> None:
    platform = NpuPlatform()
    assert platform.device_count() == 2
    assert platform.device_names() == ["Ascend910B3", "Ascend910B3"]
    assert platform.dist_backend == "hccl"
    assert platform.memory_stats() == {
        "allocated_bytes": 1 << 20,
        "peak_allocated_bytes": 3 << 20,
    }
    platform.reset_peak_memory(0)
    platform.synchronize(0)
    assert npu_runtime.calls == ["reset_peak_memory_stats(0)", "synchronize(0)"]
    assert platform.memory_stats()["peak_allocated_bytes"] == 1 << 20
    described = platform.describe()
    assert described["device_type"] == "npu"
    assert described["preferred_attention_backends"] == ["npu-fusion", "sdpa"]
    assert described["fp8_dtype"] is None
    assert described["compatibility"]["torch-npu"] == ">=2.5.1"
    assert described["system_requirements"]["CANN"].startswith(">=8.0")


def test_npu_quant_support_is_data(npu_runtime) -> None:
    platform = NpuPlatform()
    assert platform.quant_dtype_for("int8") == "int8"
    with pytest.raises(ConfigError, match="no fp8 matmul"):
        platform.quant_dtype_for("float8_e4m3fn")
    with pytest.raises(ConfigError, match="supported: int8"):
        platform.quant_dtype_for("int4")
