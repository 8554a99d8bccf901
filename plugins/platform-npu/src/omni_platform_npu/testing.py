"""Stand-ins for ``torch_npu`` so this plugin can be tested on any CPU machine.

- :func:`reference_fusion_attention` follows ``torch_npu.npu_fusion_attention``'s calling
  convention faithfully (layouts ``BSND``/``BNSD``/``BSH``/``SBH``, ``head_num``, ``scale``
  applied as ``scale * (pse + q @ k^T)``, boolean ``atten_mask`` where True means masked out and
  only the shapes the kernel accepts, fp16/bf16 only, a 7-tuple result) and computes in float32
  on CPU. It refuses what the real kernel refuses, so a caller's conversions are really checked.
- :class:`StandInNpuRuntime` plays ``torch.npu`` (device count, names, sync, memory counters).
- :func:`install_stand_in` puts both in place through a pytest ``monkeypatch`` (undone after the
  test); :func:`make_ascend_host` lays out device nodes and an installed-but-unimportable
  ``torch_npu`` distribution, for detector tests.

Imports torch lazily; nothing here runs at plugin load.
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

_LAYOUTS = ("BSND", "BNSD", "BSH", "SBH")


def _to_bnsd(x: torch.Tensor, layout: str, head_dim: int | None) -> torch.Tensor:
    if layout == "BSND":
        return x.transpose(1, 2)
    if layout == "BNSD":
        return x
    if layout == "BSH":
        b, s, h = x.shape
        return x.reshape(b, s, h // head_dim, head_dim).transpose(1, 2)
    s, b, h = x.shape  # SBH
    return x.reshape(s, b, h // head_dim, head_dim).permute(1, 2, 0, 3)


def _from_bnsd(x: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "BSND":
        return x.transpose(1, 2)
    if layout == "BNSD":
        return x
    b, n, s, d = x.shape
    if layout == "BSH":
        return x.transpose(1, 2).reshape(b, s, n * d)
    return x.permute(2, 0, 1, 3).reshape(s, b, n * d)  # SBH


def reference_fusion_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_num: int,
    input_layout: str,
    *,
    pse: torch.Tensor | None = None,
    padding_mask: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    scale: float = 1.0,
    keep_prob: float = 1.0,
    pre_tockens: int = 2147483647,
    next_tockens: int = 2147483647,
    inner_precise: int = 0,
    prefix: list[int] | None = None,
    actual_seq_qlen: list[int] | None = None,
    actual_seq_kvlen: list[int] | None = None,
    sparse_mode: int = 0,
    gen_mask_parallel: bool = True,
    sync: bool = False,
) -> tuple[Any, ...]:
    """CPU stand-in for ``torch_npu.npu_fusion_attention`` (same arguments, same checks)."""
    import torch

    if input_layout not in _LAYOUTS:
        raise ValueError(f"input_layout must be one of {_LAYOUTS}, got {input_layout!r}")
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if tensor.dtype not in (torch.float16, torch.bfloat16):
            raise TypeError(f"{name} must be float16 or bfloat16, got {tensor.dtype}")
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError("query, key and value must share a dtype")
    if keep_prob != 1.0:
        raise NotImplementedError("stand-in: dropout (keep_prob < 1) is not modelled")
    if padding_mask is not None:
        raise ValueError("padding_mask is not supported by npu_fusion_attention")
    if sparse_mode != 0 or pre_tockens != 2147483647 or next_tockens != 2147483647:
        raise NotImplementedError("stand-in: only sparse_mode=0 with full token windows")
    if prefix is not None or actual_seq_qlen is not None or actual_seq_kvlen is not None:
        raise NotImplementedError("stand-in: varlen / prefix modes are not modelled")
    head_dim = None
    if input_layout in ("BSH", "SBH"):
        head_dim = query.shape[-1] // head_num
    q = _to_bnsd(query, input_layout, head_dim).float()
    k = _to_bnsd(key, input_layout, head_dim).float()
    v = _to_bnsd(value, input_layout, head_dim).float()
    b, n1, sq, d = q.shape
    n2, skv = k.shape[1], k.shape[2]
    if n1 != head_num:
        raise ValueError(f"head_num={head_num} but the query has {n1} heads")
    if n1 % n2:
        raise ValueError(f"key/value heads ({n2}) must divide query heads ({n1})")
    if d % 16 or d > 512:
        raise ValueError(f"head dim must be a multiple of 16 and at most 512, got {d}")
    if n2 != n1:
        k = k.repeat_interleave(n1 // n2, dim=1)
        v = v.repeat_interleave(n1 // n2, dim=1)
    scores = q @ k.transpose(-1, -2)
    if pse is not None:
        if pse.dtype != query.dtype:
            raise TypeError(f"pse must have the query dtype {query.dtype}, got {pse.dtype}")
        if tuple(pse.shape) not in ((b, n1, sq, skv), (1, n1, sq, skv)):
            raise ValueError(f"pse must be BNSS or 1NSS, got shape {tuple(pse.shape)}")
        scores = scores + pse.float()
    scores = scores * scale
    if atten_mask is not None:
        if atten_mask.dtype not in (torch.bool, torch.uint8):
            raise TypeError(f"atten_mask must be bool or uint8, got {atten_mask.dtype}")
        allowed = ((b, n1, sq, skv), (b, 1, sq, skv), (1, 1, sq, skv), (sq, skv))
        if tuple(atten_mask.shape) not in allowed:
            raise ValueError(
                f"atten_mask must be BNSS, B1SS, 11SS or SS, got shape {tuple(atten_mask.shape)}"
            )
        scores = scores.masked_fill(atten_mask.bool(), float("-inf"))
    softmax_max = scores.amax(dim=-1, keepdim=True)
    probs = torch.softmax(scores, dim=-1)
    out = (probs @ v).to(query.dtype)
    softmax_sum = torch.exp(scores - softmax_max).sum(dim=-1, keepdim=True)
    return (
        _from_bnsd(out, input_layout),
        softmax_max.expand(b, n1, sq, 8).contiguous(),
        softmax_sum.expand(b, n1, sq, 8).contiguous(),
        torch.empty(0),
        0,
        0,
        0,
    )


@dataclass
class StandInNpuRuntime:
    """Plays ``torch.npu`` for platform tests; records what was called."""

    devices: int = 2
    device_name: str = "Ascend910B3"
    allocated: int = 1 << 20
    peak: int = 3 << 20
    calls: list[str] = field(default_factory=list)

    def is_available(self) -> bool:
        return self.devices > 0

    def device_count(self) -> int:
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


def stand_in_module(runtime: StandInNpuRuntime, version: str = "2.13.0") -> types.ModuleType:
    """A module object that looks like an imported ``torch_npu`` to callers."""
    module = types.ModuleType("torch_npu")
    module.__spec__ = importlib.machinery.ModuleSpec("torch_npu", loader=None)
    module.__version__ = version  # type: ignore[attr-defined]
    module.npu_fusion_attention = reference_fusion_attention  # type: ignore[attr-defined]
    module.npu = runtime  # type: ignore[attr-defined]
    return module


def install_stand_in(
    monkeypatch: pytest.MonkeyPatch, *, devices: int = 2, version: str = "2.13.0"
) -> StandInNpuRuntime:
    """Make ``import torch_npu`` and ``torch.npu`` resolve to stand-ins for one test."""
    import torch

    runtime = StandInNpuRuntime(devices=devices)
    monkeypatch.setitem(sys.modules, "torch_npu", stand_in_module(runtime, version))
    monkeypatch.setattr(torch, "npu", runtime, raising=False)
    return runtime


def make_ascend_host(
    root: Path, *, devices: int = 2, torch_npu_version: str = "2.13.0"
) -> tuple[Path, Path]:
    """Lay out ``root/dev/davinci<N>`` and an installed ``torch_npu`` under ``root/site``.

    The package raises on import, so a detector test proves that detection never imports it.
    Returns ``(dev_dir, site_dir)``: point ``detect.DEV_DIR`` at the first, prepend the second to
    ``sys.path``.
    """
    dev = root / "dev"
    dev.mkdir(parents=True, exist_ok=True)
    (dev / "davinci_manager").touch()
    for index in range(devices):
        (dev / f"davinci{index}").touch()
    site = root / "site"
    package = site / "torch_npu"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(
        'raise ImportError("stand-in torch_npu: detection must not import torch_npu")\n'
    )
    dist = site / f"torch_npu-{torch_npu_version}.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: torch_npu\nVersion: {torch_npu_version}\n"
    )
    return dev, site
