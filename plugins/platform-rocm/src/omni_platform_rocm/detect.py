"""Cheap, side-effect-free detection of AMD GPUs under a ROCm (HIP) build of torch.

- The build: ``torch.version.hip`` is a version string on ROCm wheels and None elsewhere.
  Importing torch does not start the HIP runtime.
- The devices: read from the amdgpu driver's KFD topology in sysfs
  (``/sys/class/kfd/kfd/topology/nodes/<n>/properties``; GPU nodes have a non-zero
  ``gfx_target_version``, CPU nodes zero) plus ``/dev/kfd``. That is a few small file reads, the
  same source rocminfo and amd-smi use, and it tells the architecture (gfx942 = MI300) without
  touching the GPU. Asking ``torch.cuda.device_count()`` instead would start the HIP runtime,
  which reads ``HIP_*`` switches such as ``HIP_FORCE_DEV_KERNARG`` once: the platform's
  environment defaults would then be applied too late.
- Visibility follows the runtime: ``ROCR_VISIBLE_DEVICES`` first, then ``HIP_VISIBLE_DEVICES``
  (or, when unset, ``CUDA_VISIBLE_DEVICES``, which HIP also honours); an empty value hides all.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path

from omni_core import Availability
from omni_platform_rocm.compat import MIN_ROCM

#: The KFD topology and device node (module attributes so tests can point them at a tmp dir).
KFD_TOPOLOGY = Path("/sys/class/kfd/kfd/topology/nodes")
DEV_KFD = Path("/dev/kfd")


@dataclass(frozen=True)
class GpuNode:
    """One AMD GPU as the KFD topology describes it."""

    node: int
    gfx_target_version: int

    @property
    def arch(self) -> str:
        """The LLVM target name: 90402 -> gfx942, 90010 -> gfx90a, 110000 -> gfx1100."""
        version = self.gfx_target_version
        major, minor, stepping = version // 10000, (version // 100) % 100, version % 100
        return f"gfx{major}{minor:x}{stepping:x}"


def _properties(path: Path) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            values[key] = int(value)
    return values


def gpu_nodes() -> list[GpuNode]:
    """Every GPU node of the KFD topology, in the runtime's order (by node id)."""
    try:
        entries = [p for p in KFD_TOPOLOGY.iterdir() if p.name.isdigit()]
    except OSError:
        return []
    gpus = []
    for entry in sorted(entries, key=lambda p: int(p.name)):
        try:
            props = _properties(entry / "properties")
        except OSError:
            continue
        if props.get("gfx_target_version", 0) > 0:
            gpus.append(GpuNode(int(entry.name), props["gfx_target_version"]))
    return gpus


def _select(items: list[GpuNode], raw: str | None) -> list[GpuNode]:
    if raw is None:
        return items
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if parts and not all(p.isdigit() for p in parts):  # UUIDs: trust the count
        return items[: len(parts)]
    return [items[int(p)] for p in parts if int(p) < len(items)]


def visible_gpus() -> list[GpuNode]:
    """GPU nodes after ROCR_VISIBLE_DEVICES, then HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES."""
    gpus = _select(gpu_nodes(), os.environ.get("ROCR_VISIBLE_DEVICES"))
    hip = os.environ.get("HIP_VISIBLE_DEVICES")
    return _select(gpus, hip if hip is not None else os.environ.get("CUDA_VISIBLE_DEVICES"))


def hip_version() -> str | None:
    """``torch.version.hip`` (imports torch, which does not start the HIP runtime)."""
    import torch

    return getattr(torch.version, "hip", None) or None


def parse_rocm_version(hip: str) -> tuple[int, int] | None:
    match = re.match(r"^(\d+)\.(\d+)", hip)
    return (int(match.group(1)), int(match.group(2))) if match else None


def detect_rocm() -> Availability:
    """The detector: yes for a ROCm torch with at least one visible AMD GPU."""
    if importlib.util.find_spec("torch") is None:
        return Availability.no("torch is not installed")
    hip = hip_version()
    if hip is None:
        import torch

        return Availability.no(
            f"torch {torch.__version__} is not a ROCm build (torch.version.hip is None); "
            "install a ROCm wheel of torch"
        )
    if not DEV_KFD.exists():
        return Availability.no(
            f"{DEV_KFD} is missing: the amdgpu driver is not loaded or the GPU is not passed "
            "into this container (--device=/dev/kfd --device=/dev/dri)"
        )
    present = gpu_nodes()
    if not present:
        return Availability.no(f"no AMD GPU in the KFD topology ({KFD_TOPOLOGY})")
    visible = visible_gpus()
    if not visible:
        return Availability.no(
            "every AMD GPU is hidden by ROCR_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES / "
            f"CUDA_VISIBLE_DEVICES ({len(present)} present)"
        )
    archs = ", ".join(sorted({g.arch for g in visible}))
    reason = f"ROCm {hip}, {len(visible)} AMD GPU(s) ({archs})"
    version = parse_rocm_version(hip)
    if version is not None and version < MIN_ROCM:
        reason += f"; ROCm {version[0]}.{version[1]} is older than the supported 6.0"
    return Availability.yes(reason)
