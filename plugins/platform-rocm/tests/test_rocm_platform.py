"""Selection against the built-ins, OMNI_PLATFORM, env defaults, the Platform API, fp8 data."""

from __future__ import annotations

import os

import pytest
import torch

from omni_core import ConfigError, PlatformError
from omni_core.testing import check_available, current_platform, isolated_host, select_platform
from omni_platform_rocm.platform import RocmPlatform


def test_rocm_spec_registered_with_compat_row(rocm_host) -> None:
    spec = rocm_host.registry.platforms["rocm"]
    assert spec.plugin == "omni-platform-rocm"
    assert spec.device_type == "cuda"
    assert spec.priority > rocm_host.registry.platforms["cuda"].priority
    assert spec.compatibility == {"omni-core": ">=0.3,<0.4", "torch": ">=2.5"}


def test_rocm_beats_builtin_cuda_on_a_hip_build(rocm_host, mi300) -> None:
    selection = select_platform(rocm_host.registry)
    assert selection.spec.name == "rocm"
    assert isinstance(selection.platform, RocmPlatform)
    cuda = check_available(rocm_host.registry.platforms["cuda"])
    assert not cuda.available and "ROCm (HIP) build" in cuda.reason


def test_rocm_without_the_plugin_a_hip_build_falls_back_to_cpu(mi300) -> None:
    with isolated_host() as builtins_only:
        assert select_platform(builtins_only.registry).spec.name == "cpu"


def test_rocm_absent_falls_back_to_cpu_and_says_why(rocm_host, no_hip, clean_env) -> None:
    selection = select_platform(rocm_host.registry)
    assert selection.spec.name == "cpu"
    assert "rocm: torch " in selection.reason and "is not a ROCm build" in selection.reason


def test_rocm_forced_with_omni_platform(rocm_host, mi300, monkeypatch) -> None:
    monkeypatch.setenv("OMNI_PLATFORM", "cpu")
    assert select_platform(rocm_host.registry).spec.name == "cpu"
    monkeypatch.setenv("OMNI_PLATFORM", "rocm")
    selection = select_platform(rocm_host.registry)
    assert selection.spec.name == "rocm"
    assert selection.reason == "forced by OMNI_PLATFORM=rocm"


def test_rocm_forced_but_unavailable_is_a_clear_error(
    rocm_host, no_hip, clean_env, monkeypatch
) -> None:
    monkeypatch.setenv("OMNI_PLATFORM", "rocm")
    with pytest.raises(PlatformError) as excinfo:
        select_platform(rocm_host.registry)
    message = str(excinfo.value)
    assert "'rocm'" in message and "not available" in message and "not a ROCm build" in message
    assert "\n" not in message


def test_rocm_env_defaults_applied_only_when_selected(rocm_host, clean_env, mi300) -> None:
    os.environ["MIOPEN_FIND_MODE"] = "NORMAL"  # the user's value wins over the default
    assert current_platform().name == "rocm"
    assert os.environ["HIP_FORCE_DEV_KERNARG"] == "1"
    assert os.environ["TORCH_BLAS_PREFER_HIPBLASLT"] == "1"
    assert os.environ["MIOPEN_FIND_MODE"] == "NORMAL"


def test_rocm_env_defaults_untouched_when_not_selected(rocm_host, clean_env, no_hip) -> None:
    assert current_platform().name == "cpu"
    for key in RocmPlatform.env_defaults:
        assert key not in os.environ


def test_rocm_platform_api_through_torch_cuda(mi300) -> None:
    platform = RocmPlatform()
    assert platform.device_count() == 2
    assert platform.device_names() == ["AMD Instinct MI300X"] * 2
    assert platform.device(1) == torch.device("cuda", 1)
    assert platform.memory_stats() == {"allocated_bytes": 5 << 20, "peak_allocated_bytes": 9 << 20}
    platform.reset_peak_memory(0)
    platform.synchronize(0)
    assert mi300.calls == ["reset_peak_memory_stats(0)", "synchronize(0)"]
    described = platform.describe()
    assert described["gfx_arch"] == "gfx942"
    assert described["hip_version"] == "6.4.43482-0f2d60242"
    assert described["preferred_attention_backends"] == ["aiter", "flash-attn-ck", "sdpa"]
    assert described["collective_library"] == "rccl"
    assert described["system_requirements"]["ROCm (torch.version.hip)"].startswith(">=6.0")


def test_rocm_dist_backend_is_the_name_torch_distributed_takes(mi300) -> None:
    import torch.distributed as dist

    platform = RocmPlatform()
    assert platform.dist_backend == "nccl"  # RCCL, under torch's name for it
    assert platform.dist_backend in dist.Backend.backend_list
    assert "rccl" not in dist.Backend.backend_list


def test_rocm_mi300_takes_fnuz_fp8(mi300) -> None:
    platform = RocmPlatform()
    assert platform.fp8_dtype == "float8_e4m3fnuz"
    assert "float8_e4m3fnuz" in platform.supported_dtypes
    assert "float8_e4m3fn" not in platform.supported_dtypes
    assert platform.quant_dtype_for("float8_e4m3fn") == "float8_e4m3fnuz"
    assert platform.quant_dtype_for("float8_e5m2") == "float8_e5m2fnuz"
    assert platform.quant_dtype_for("int8") == "int8"
    assert hasattr(torch, platform.fp8_dtype)
    with pytest.raises(ConfigError, match="not supported on platform 'rocm'"):
        platform.quant_dtype_for("int4")


@pytest.mark.parametrize(
    ("arch", "fp8"), [("gfx950", "float8_e4m3fn"), ("gfx1201", "float8_e4m3fn"), ("gfx90a", None)]
)
def test_rocm_fp8_format_follows_the_architecture(make_machine, arch: str, fp8) -> None:
    make_machine(archs=(arch,))
    platform = RocmPlatform()
    assert platform.gfx_arch == arch
    assert platform.fp8_dtype == fp8
    if fp8 is None:
        assert not any(d.startswith("float8") for d in platform.supported_dtypes)
        with pytest.raises(ConfigError, match="gfx90a has none"):
            platform.quant_dtype_for("float8_e4m3fn")
    else:
        assert platform.quant_dtype_for("float8_e4m3fnuz") == fp8
