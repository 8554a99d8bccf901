"""Stand-ins for a ROCm machine so this plugin can be tested on any CPU machine.

- :func:`make_kfd_topology` lays out the amdgpu driver's sysfs topology (a CPU node and GPU
  nodes with their ``gfx_target_version``) and a ``/dev/kfd`` file.
- :func:`install_hip_build` makes the running CPU torch look like a ROCm build with GPUs:
  ``torch.version.hip`` and ``torch.cuda``'s device queries, through a pytest ``monkeypatch``
  (undone after the test).
- :func:`reference_flash_attn_func` follows ``flash_attn_func``'s calling convention
  (``[B, S, H, D]``, ``softmax_scale``, ``dropout_p``, ``causal``, fp16/bf16 only, head size
  <= 256, GQA) and computes in float32; :func:`install_kernel_modules` serves it as ``aiter``
  and ``flash_attn``.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pytest
    import torch

#: gfx_target_version values as the KFD reports them.
GFX_TARGET_VERSIONS = {
    "gfx90a": 90010,
    "gfx942": 90402,
    "gfx950": 90500,
    "gfx1100": 110000,
    "gfx1201": 120001,
}


def make_kfd_topology(
    root: Path, archs: tuple[str, ...] = ("gfx942", "gfx942")
) -> tuple[Path, Path]:
    """Write ``root/topology/nodes/<n>/properties`` (node 0 a CPU) and ``root/dev/kfd``.

    Returns ``(topology_dir, dev_kfd)`` for ``detect.KFD_TOPOLOGY`` and ``detect.DEV_KFD``.
    """
    nodes = root / "topology" / "nodes"
    entries = [("cpu", 0), *((arch, GFX_TARGET_VERSIONS[arch]) for arch in archs)]
    for index, (_, version) in enumerate(entries):
        node = nodes / str(index)
        node.mkdir(parents=True, exist_ok=True)
        simd = 0 if version == 0 else 304
        (node / "properties").write_text(
            f"cpu_cores_count {16 if version == 0 else 0}\nsimd_count {simd}\n"
            f"gfx_target_version {version}\nvendor_id {0 if version == 0 else 4098}\n"
            "marketing_name 0\n"
        )
    dev = root / "dev"
    dev.mkdir(parents=True, exist_ok=True)
    (dev / "kfd").touch()
    return nodes, dev / "kfd"


@dataclass
class StandInHipRuntime:
    """Plays ``torch.cuda`` of a ROCm build for platform tests; records what was called."""

    devices: int = 2
    device_name: str = "AMD Instinct MI300X"
    allocated: int = 5 << 20
    peak: int = 9 << 20
    calls: list[str] = field(default_factory=list)
    #: Queries that would start the HIP runtime on a real machine (detection must make none).
    runtime_queries: list[str] = field(default_factory=list)

    def is_available(self) -> bool:
        self.runtime_queries.append("is_available")
        return self.devices > 0

    def device_count(self) -> int:
        self.runtime_queries.append("device_count")
        return self.devices

    def get_device_name(self, index: int = 0) -> str:
        return self.device_name

    def synchronize(self, device: Any = None) -> None:
        self.calls.append(f"synchronize({device})")

    def memory_allocated(self, device: Any = None) -> int:
        return self.allocated

    def max_memory_allocated(self, device: Any = None) -> int:
        return self.peak

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self.calls.append(f"reset_peak_memory_stats({device})")
        self.peak = self.allocated


def install_hip_build(
    monkeypatch: pytest.MonkeyPatch, *, hip: str = "6.4.43482-0f2d60242", devices: int = 2
) -> StandInHipRuntime:
    """Make this torch report a HIP build whose ``torch.cuda`` sees ``devices`` GPUs."""
    import torch

    runtime = StandInHipRuntime(devices=devices)
    monkeypatch.setattr(torch.version, "hip", hip, raising=False)
    for name in (
        "is_available",
        "device_count",
        "get_device_name",
        "synchronize",
        "memory_allocated",
        "max_memory_allocated",
        "reset_peak_memory_stats",
    ):
        monkeypatch.setattr(torch.cuda, name, getattr(runtime, name))
    return runtime


def reference_flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    alibi_slopes: torch.Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    **_: Any,
) -> Any:
    """CPU stand-in for ``flash_attn_func`` / ``aiter.flash_attn_func`` over ``[B, S, H, D]``."""
    import torch

    if q.dim() != 4:
        raise ValueError(f"q must be [batch, seq, heads, head_dim], got shape {tuple(q.shape)}")
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if tensor.dtype not in (torch.float16, torch.bfloat16):
            raise TypeError(f"FlashAttention only supports fp16 and bf16, {name} is {tensor.dtype}")
    if dropout_p != 0.0:
        raise NotImplementedError("stand-in: dropout is not modelled")
    if window_size != (-1, -1) or alibi_slopes is not None:
        raise NotImplementedError("stand-in: sliding windows and ALiBi are not modelled")
    head_dim, heads, kv_heads = q.shape[-1], q.shape[2], k.shape[2]
    if head_dim > 256:
        raise ValueError(f"head dim at most 256, got {head_dim}")
    if heads % kv_heads:
        raise ValueError("number of heads in key/value must divide number of heads in query")
    scale = head_dim**-0.5 if softmax_scale is None else softmax_scale
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    if kv_heads != heads:
        kf = kf.repeat_interleave(heads // kv_heads, dim=1)
        vf = vf.repeat_interleave(heads // kv_heads, dim=1)
    scores = (qf @ kf.transpose(-1, -2)) * scale
    if causal:
        sq, skv = scores.shape[-2:]
        keep = torch.ones(sq, skv, dtype=torch.bool).tril(diagonal=skv - sq)
        scores = scores.masked_fill(~keep, float("-inf"))
    out = (torch.softmax(scores, dim=-1) @ vf).transpose(1, 2).to(q.dtype)
    return (out, None, None) if return_attn_probs else out


def _module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, loader=None)
    module.flash_attn_func = reference_flash_attn_func  # type: ignore[attr-defined]
    return module


def install_kernel_modules(
    monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...] = ("aiter", "flash_attn")
) -> dict[str, types.ModuleType]:
    """Serve the stand-in kernel as importable ``aiter`` / ``flash_attn`` for one test."""
    modules = {name: _module(name) for name in names}
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return modules
