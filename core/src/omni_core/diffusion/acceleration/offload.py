"""Offloading a pipeline's components to host memory, with diffusers' and accelerate's hooks.

Two modes (``options.memory.offload``), applied by :func:`apply_offload` once the pipeline's
components are loaded on the CPU (:func:`load_device` says where to load them), LoRA adapters
loaded and acceleration applied:

* ``model``: each component moves to the device when it runs and every other component of the
  group goes back to the host first (accelerate's ``CpuOffload`` hook, made exclusive), so the
  device holds one component plus activations; VAE ``encode``/``decode`` trigger it too
  (diffusers' ``apply_forward_hook``).
* ``block``: the denoisers' repeated blocks stream in one group at a time, the next group
  prefetched on a side stream while the current one runs (diffusers' ``apply_group_offloading``
  at block level, ``use_stream`` on CUDA); the other components are offloaded leaf by leaf.

``auto`` with ``max_gpu_memory`` picks one of ``none`` / ``model`` / ``block`` before loading
(:func:`plan_offload`) from the sizes in the checkpoint's safetensors headers: everything fits
in 80% of the budget -> ``none``; the largest component does -> ``model``; else ``block``.
Both modes work with step batching (a hook moves weights, never a request's tensors).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.contract.config import MemoryConfig
    from omni_core.contract.pipeline import Pipeline, PipelineOptions

#: The share of ``max_gpu_memory`` weights may take; the rest is for activations.
WEIGHTS_SHARE = 0.8
_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}


@dataclass
class OffloadReport:
    """What :func:`apply_offload` did: the mode, why, and each component's hooks."""

    mode: str = "none"
    reason: str = ""
    components: dict[str, str] = field(default_factory=dict)
    hooks: list[Any] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "reason": self.reason, "components": dict(self.components)}


def component_bytes(path: Path, components: Iterable[str], dtype_bytes: int) -> dict[str, int]:
    """Bytes each component's floating-point weights take at ``dtype_bytes`` per element,
    read from its safetensors headers (no weight is read)."""
    out: dict[str, int] = {}
    for name in components:
        total = 0
        for file in sorted((path / name).glob("*.safetensors")):
            with file.open("rb") as handle:
                (length,) = struct.unpack("<Q", handle.read(8))
                header = json.loads(handle.read(length))
            for key, info in header.items():
                if key == "__metadata__" or info.get("dtype") not in _BYTES:
                    continue
                count = 1
                for dim in info.get("shape", []):
                    count *= int(dim)
                total += count * dtype_bytes
        out[name] = total
    return out


def plan_offload(
    memory: MemoryConfig, path: Path, components: Iterable[str], dtype_bytes: int
) -> tuple[str, str]:
    """``(mode, reason)``: the configured mode, or the one ``max_gpu_memory`` picks (``auto``)."""
    if memory.offload != "auto":
        return memory.offload, "as configured"
    if memory.max_gpu_memory is None:
        return "none", "no max_gpu_memory"
    sizes = component_bytes(path, components, dtype_bytes)
    budget = memory.max_gpu_memory * 2**30 * WEIGHTS_SHARE
    total, largest = sum(sizes.values()), max(sizes.values(), default=0)
    gib = 2**30
    if total <= budget:
        return "none", f"weights {total / gib:.1f} GiB fit {memory.max_gpu_memory:g} GiB"
    if largest <= budget:
        return "model", (
            f"weights {total / gib:.1f} GiB exceed {memory.max_gpu_memory:g} GiB; the largest "
            f"component ({largest / gib:.1f} GiB) fits"
        )
    return "block", (
        f"the largest component ({largest / gib:.1f} GiB) exceeds {memory.max_gpu_memory:g} GiB"
    )


def resolve_memory(memory: MemoryConfig, path: Path, dtype: torch.dtype) -> MemoryConfig:
    """``memory`` with ``offload`` resolved to none / model / block (see :func:`plan_offload`)
    for the checkpoint folder ``path`` (every sub-folder with safetensors is a component)."""
    if memory.offload != "auto":
        return memory
    parts = [p.name for p in sorted(path.iterdir()) if p.is_dir() and any(p.glob("*.safetensors"))]
    mode, _ = plan_offload(memory, path, parts, dtype.itemsize)
    return memory.model_copy(update={"offload": mode})


def check_memory_taken(pipeline: Pipeline | None, options: PipelineOptions) -> None:
    """LoRA adapters or offload a pipeline cannot take are a ConfigError, never dropped:
    ``pipeline`` None is a parallel layout (neither is supported there yet); a loaded pipeline
    that set no :attr:`~omni_core.contract.pipeline.Pipeline.adapters` took no LoRA."""
    if pipeline is None:
        if options.lora.adapters or options.memory.offload != "none":
            raise ConfigError("lora / offload: not supported with a parallel layout yet")
        return
    if options.lora.adapters and pipeline.adapters is None:
        name = options.spec.name if options.spec is not None else type(pipeline).__name__
        raise ConfigError(f"lora: pipeline {name!r} does not take LoRA adapters")


def load_device(options: PipelineOptions) -> Any:
    """Where a pipeline loads its components: the host when they will be offloaded."""
    return "cpu" if options.memory.offload in ("model", "block") else options.device


def apply_offload(
    components: Mapping[str, torch.nn.Module | None],
    options: PipelineOptions,
    *,
    denoisers: Iterable[str] = ("transformer", "transformer_2"),
) -> OffloadReport:
    """Install the offload hooks of ``options.memory.offload`` (none: move to the device).

    ``components`` are the modules loaded on the host by :func:`load_device`; ``denoisers``
    are the ones whose blocks stream under ``block``. Returns what was done.
    """
    mode = options.memory.offload
    if mode == "auto":  # options built by hand: without a budget, auto is none
        if options.memory.max_gpu_memory is not None:
            raise ConfigError("offload: 'auto' must be resolved before loading (resolve_memory)")
        mode = "none"
    present = {k: v for k, v in components.items() if v is not None}
    report = OffloadReport(mode=mode)
    device = options.device
    if mode == "none":
        for module in present.values():
            module.to(device)
        return report
    if mode == "model":
        report.hooks = _model_offload(present, device)
        report.components = dict.fromkeys(present, "model")
        return report
    from diffusers.hooks import apply_group_offloading

    stream = getattr(device, "type", str(device)) == "cuda"
    names = set(denoisers)
    for name, module in present.items():
        if name in names:
            apply_group_offloading(
                module,
                onload_device=device,
                offload_type="block_level",
                num_blocks_per_group=options.memory.blocks_per_group,
                use_stream=stream,
                non_blocking=stream,
            )
            report.components[name] = f"block ({options.memory.blocks_per_group} per group)"
        else:
            apply_group_offloading(
                module,
                onload_device=device,
                offload_type="leaf_level",
                use_stream=stream,
                non_blocking=stream,
            )
            report.components[name] = "leaf"
    report.reason = "side-stream prefetch" if stream else "no side stream off CUDA"
    return report


def _model_offload(modules: Mapping[str, Any], device: Any) -> list[Any]:
    """accelerate's CpuOffload on each module, each first sending every other one home."""
    from accelerate.hooks import CpuOffload, add_hook_to_module

    class ExclusiveOffload(CpuOffload):
        """CpuOffload that offloads the rest of its group before moving its module in."""

        def __init__(self, name: str, group: list[Any]) -> None:
            super().__init__(execution_device=device)
            self.name = name
            self.group = group
            self.onloads = 0

        def pre_forward(self, module: Any, *args: Any, **kwargs: Any) -> Any:
            for other in self.group:
                if other is not self:
                    other.send_home()
            self.onloads += 1
            return super().pre_forward(module, *args, **kwargs)

        def send_home(self) -> None:
            module = self.module
            if next(module.parameters()).device.type != "cpu":
                module.to("cpu")

    group: list[Any] = []
    for name, module in modules.items():
        hook = ExclusiveOffload(name, group)
        hook.module = module
        add_hook_to_module(module, hook, append=True)
        group.append(hook)
    return group


__all__ = [
    "OffloadReport",
    "apply_offload",
    "check_memory_taken",
    "component_bytes",
    "load_device",
    "plan_offload",
    "resolve_memory",
]
