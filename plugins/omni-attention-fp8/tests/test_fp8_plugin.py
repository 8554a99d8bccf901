"""The installed plugin: discovery, lazy imports, availability reasons, selection per role."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from importlib import metadata
from pathlib import Path

import pytest
import torch

from omni_attention_fp8.cudnn_graph import fp8_cudnn_available
from omni_core import ConfigError
from omni_core.testing import (
    assert_package_imports_sound,
    attention_router,
    backend_availability,
    current_platform,
    dispatch_attention,
    installed_host,
    run_cli,
    use_router,
)

ROOT = Path(__file__).resolve().parents[1]


def test_entry_point_is_discovered_with_both_backends() -> None:
    points = {ep.name: ep.value for ep in metadata.entry_points(group="omni")}
    assert points.get("omni-attention-fp8") == "omni_attention_fp8.plugin"
    host = installed_host("omni-attention-fp8")
    host.infos()
    info = host.plugins["omni-attention-fp8"]
    assert info.status == "ok", info.error
    assert info.distribution == "omni-attention-fp8"
    assert {k: v for k, v in info.provides.items() if v} == {
        "attention_backends": ["fp8-cudnn", "fp8-emulated"]
    }
    specs = host.registry.attention_backends
    for name in ("fp8-cudnn", "fp8-emulated"):
        assert specs[name].lossy and specs[name].precision == "fp8"


def test_package_imports_are_sound() -> None:
    assert_package_imports_sound(ROOT / "src" / "omni_attention_fp8", tests=ROOT / "tests")


def test_plugin_module_imports_no_torch() -> None:
    code = (
        "import sys, omni_attention_fp8.plugin; "
        "sys.exit('torch imported' if 'torch' in sys.modules else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_kernel_modules_import_without_cudnn() -> None:
    """cudnn is imported when a graph is built, never at import: the backend loads anywhere."""
    code = (
        "import sys, omni_attention_fp8.cudnn_kernel, omni_attention_fp8.cudnn_graph; "
        "sys.exit('cudnn imported' if 'cudnn' in sys.modules else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_auto_never_picks_fp8_and_each_role_can(fp8_host) -> None:
    platform = current_platform()
    assert set(attention_router(fp8_host.registry, platform).names.values()) == {"sdpa"}
    router = attention_router(fp8_host.registry, platform, self="fp8-emulated")
    assert router.names == {"self": "fp8-emulated", "cross": "sdpa", "joint": "sdpa"}
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 32, 2, 16, generator=g) for _ in range(3))
    with use_router(router):
        fp8 = dispatch_attention(q, k, v, role="self")
        exact = dispatch_attention(q, k, v, role="cross")
    assert 0 < float((fp8 - exact).abs().max()) < 0.5  # quantized, and still attention


def test_fp8_cudnn_on_cpu_is_refused_with_its_reason(fp8_host) -> None:
    spec = fp8_host.registry.attention_backends["fp8-cudnn"]
    assert backend_availability(spec, "cpu").reason == "runs on cuda, not on cpu"
    with pytest.raises(ConfigError, match=r"attention\.self: 'fp8-cudnn' cannot run on platform"):
        attention_router(fp8_host.registry, current_platform(), self="fp8-cudnn")


def _fake_gpu(monkeypatch, capability: tuple[int, int]) -> None:
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)


def _fake_cudnn(monkeypatch, version: int | None) -> None:
    real = importlib.util.find_spec

    def find_spec(name, *args):
        if name == "cudnn":
            return None if version is None else object()
        return real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    if version is not None:
        module = types.ModuleType("cudnn")
        module.backend_version = lambda: version
        monkeypatch.setitem(sys.modules, "cudnn", module)


@pytest.mark.parametrize(
    ("gpu", "cudnn", "expected"),
    [
        (None, None, "no CUDA device (torch.cuda.is_available() is False)"),
        ((8, 0), 91300, "needs compute capability 9.0+ (Hopper); this GPU is 8.0"),
        ((9, 0), None, "nvidia-cudnn-frontend is not installed (pip install "),
        ((9, 0), 90000, "cuDNN 90000 cannot run fp8 attention (9.1+, not 9.10.0)"),
        ((9, 0), 91000, "cuDNN 91000 cannot run fp8 attention"),
        ((9, 0), 91300, ""),
        ((10, 0), 91300, ""),
    ],
)
def test_availability_says_plainly_why(monkeypatch, gpu, cudnn, expected) -> None:
    if gpu is None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    else:
        _fake_gpu(monkeypatch, gpu)
    _fake_cudnn(monkeypatch, cudnn)
    result = fp8_cudnn_available()
    assert result.available is (expected == "")
    assert expected in result.reason


def test_a_broken_frontend_is_a_reason(monkeypatch) -> None:
    _fake_gpu(monkeypatch, (9, 0))
    _fake_cudnn(monkeypatch, 91300)

    def broken():
        raise OSError("libcudnn.so.9: cannot open shared object file")

    sys.modules["cudnn"].backend_version = broken
    reason = fp8_cudnn_available().reason
    assert reason == (
        "the cudnn frontend does not load: OSError: libcudnn.so.9: cannot open shared object file"
    )


def test_doctor_lists_both_with_their_reasons(fp8_host) -> None:
    result = run_cli("doctor")
    rows = [line for line in result.output.splitlines() if line.strip().startswith("fp8-")]
    assert any("fp8-cudnn" in r and "runs on cuda, not on cpu" in r for r in rows), rows
    assert any("fp8-emulated" in r and "yes" in r for r in rows), rows


def test_on_a_hopper_gpu_fp8_cudnn_is_selectable_per_role_and_never_auto(
    fp8_host, monkeypatch
) -> None:
    """A stand-in Hopper GPU with the frontend: fp8-cudnn is usable, the highest priority of
    all backends here, and still never what ``auto`` resolves to."""
    from omni_core.runtime import CudaPlatform

    class ByPriority(CudaPlatform):
        preferred_attention_backends = ()  # auto goes by priority alone

    _fake_gpu(monkeypatch, (9, 0))
    _fake_cudnn(monkeypatch, 91300)
    registry = fp8_host.registry
    spec = registry.attention_backends["fp8-cudnn"]
    assert backend_availability(spec, "cuda").available
    assert spec.priority == max(s.priority for s in registry.attention_backends.values())
    auto = attention_router(registry, ByPriority())
    assert "fp8-cudnn" not in auto.names.values() and "fp8-emulated" not in auto.names.values()
    router = attention_router(registry, ByPriority(), self="fp8-cudnn", joint="fp8-cudnn")
    assert router.names["self"] == router.names["joint"] == "fp8-cudnn"
    assert router.names["cross"] == auto.names["cross"]
