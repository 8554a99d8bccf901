"""Regional compilation: ``torch.compile`` each repeated transformer block, not the whole model.

Compiling one block class is cheap (all blocks share the compiled code: Dynamo caches by code
object, so block 2..N reuse block 1's graph) and it leaves the Python glue (embeddings, cache
hooks, schedulers) eager. We compile the block's ``forward`` *function*, so step-cache hooks
installed afterwards wrap compiled blocks instead of being traced into them.

Shapes: ``dynamic=False`` by default, i.e. a size bucket is one exact input shape (batch incl.
CFG, frames, height, width); a new bucket compiles once, a repeated one never recompiles. The
report gives the compile time per bucket (the first call's wall time minus nothing: it *is* the
compile plus one run) and Dynamo's recompile count.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import ConfigError
from omni_core.diffusion.denoisers import BLOCK_LIST_NAMES, block_list

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.diffusion.denoisers import DenoiserAdapter


@dataclass
class CompileReport:
    """What was compiled and what compiling cost so far."""

    component: str
    blocks: int = 0
    block_class: str = ""
    mode: str | None = None
    dynamic: bool | None = False
    buckets: dict[str, float] = field(default_factory=dict)

    @property
    def compile_s(self) -> float:
        return sum(self.buckets.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "component": self.component,
            "blocks": self.blocks,
            "block_class": self.block_class,
            "mode": self.mode,
            "dynamic": self.dynamic,
            "buckets": len(self.buckets),
            "compile_s": round(self.compile_s, 3),
            "recompiles": recompile_count(),
        }


def recompile_count() -> int:
    """Dynamo's count of graphs compiled after the first for the same code (0 when unused)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover
        return 0
    return int(sum(counters["recompiles"].values())) if "recompiles" in counters else 0


def find_repeated_blocks(
    module: Any, adapter: DenoiserAdapter | None = None
) -> list[tuple[str, Any]]:
    """The blocks to compile: the adapter's block lists when it names some that exist, else
    diffusers' ``_repeated_blocks`` classes, else the conventional block-list names."""
    import torch

    if adapter is not None:
        try:
            return block_list(module, adapter)
        except ConfigError:
            pass  # none of the adapter's lists: fall back on the model's own declaration
    names = tuple(getattr(module, "_repeated_blocks", None) or ())
    if names:
        found = [(n, m) for n, m in module.named_modules() if type(m).__name__ in names]
        if found:
            return found
    out: list[tuple[str, Any]] = []
    for list_name, child in module.named_children():
        if list_name in BLOCK_LIST_NAMES and isinstance(child, torch.nn.ModuleList):
            out.extend((f"{list_name}.{i}", b) for i, b in enumerate(child))
    return out


def _shape_key(args: tuple, kwargs: dict) -> str:
    parts = []
    for value in (*args, *kwargs.values()):
        shape = getattr(value, "shape", None)
        if shape is not None:
            parts.append("x".join(map(str, shape)))
        elif isinstance(value, tuple | list):
            parts.extend("x".join(map(str, v.shape)) for v in value if hasattr(v, "shape"))
    return ",".join(parts)


class _TimedForward:
    """A compiled forward that times the first call of each shape bucket (compile + one run)."""

    def __init__(self, compiled: Callable[..., Any], report: CompileReport, timed: bool) -> None:
        self.compiled = compiled
        self.report = report
        self.timed = timed

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.timed:
            return self.compiled(*args, **kwargs)
        key = _shape_key(args, kwargs)
        if key in self.report.buckets:
            return self.compiled(*args, **kwargs)
        t0 = time.perf_counter()
        out = self.compiled(*args, **kwargs)
        _synchronize(out)
        self.report.buckets[key] = time.perf_counter() - t0
        return out


def _synchronize(out: Any) -> None:
    import torch

    tensor = out[0] if isinstance(out, tuple) else out
    if isinstance(tensor, torch.Tensor) and tensor.is_cuda:
        torch.cuda.synchronize(tensor.device)


def compile_repeated_blocks(
    module: Any,
    component: str = "transformer",
    *,
    mode: str | None = None,
    dynamic: bool | None = False,
    fullgraph: bool = False,
    backend: str = "inductor",
    adapter: DenoiserAdapter | None = None,
) -> CompileReport:
    """Compile every repeated block of ``module`` in place; returns a live report.

    ``adapter`` (the denoiser's registered :class:`~omni_core.diffusion.denoisers.DenoiserAdapter`)
    says which ModuleLists hold the blocks; see :func:`find_repeated_blocks`.
    """
    import torch

    blocks = find_repeated_blocks(module, adapter)
    report = CompileReport(component=component, mode=mode, dynamic=dynamic)
    if not blocks:
        return report
    # Enough cache entries for a few buckets (shapes) per block code object.
    cfg = torch._dynamo.config
    limit_name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    setattr(cfg, limit_name, max(getattr(cfg, limit_name), 64))
    report.blocks = len(blocks)
    report.block_class = type(blocks[0][1]).__name__
    for index, (_, block) in enumerate(blocks):
        original = block.forward
        compiled = torch.compile(
            original, mode=mode, dynamic=dynamic, fullgraph=fullgraph, backend=backend
        )
        # Only the first block is timed: all blocks share its compiled code.
        block.forward = _TimedForward(compiled, report, timed=index == 0)
    return report


@functools.cache
def _fused_slice_class() -> type:
    """Build the stand-in class lazily (importing this module must not import torch)."""
    import torch

    class FusedSlice(torch.nn.Module):
        """Stands in for a projection that ``fuse_projections`` folded into a fused linear.

        It owns no weights (fusing costs no memory) yet is never ``None``: diffusers' processors
        test projections for ``None`` as model flags (Wan's I2V cross-attention reads
        ``attn.add_k_proj is not None`` to split the CLIP image tokens from the text), and a
        processor that ignores the fused path still gets the exact projection. The fused module
        is looked up by name on every call, so quantization that swaps it (fp8) is followed and
        not kept alive.
        """

        def __init__(self, owner: torch.nn.Module, fused: str, index: int, parts: int) -> None:
            super().__init__()
            # A plain attribute, not a submodule: the owner already registers the fused linear;
            # registering it again would duplicate its weights in ``state_dict``.
            object.__setattr__(self, "_owner", owner)
            self.fused, self.index, self.parts = fused, index, parts

        def _fused(self) -> Any:
            return getattr(self._owner, self.fused)

        def _rows(self, size: int) -> slice:
            width = size // self.parts
            return slice(self.index * width, (self.index + 1) * width)

        @property
        def weight(self) -> torch.Tensor:
            weight = self._fused().weight
            return weight[self._rows(weight.shape[0])]

        @property
        def bias(self) -> torch.Tensor | None:
            bias = getattr(self._fused(), "bias", None)
            return None if bias is None else bias[self._rows(bias.shape[0])]

        @property
        def in_features(self) -> int:
            return self._fused().in_features

        @property
        def out_features(self) -> int:
            return self._fused().out_features // self.parts

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            fused = self._fused()
            if type(fused) is torch.nn.Linear:
                return torch.nn.functional.linear(x, self.weight, self.bias)
            # A swapped (e.g. quantized) fused module: run it whole, keep this projection's part.
            out = fused(x)
            return out[..., self._rows(out.shape[-1])]

        def extra_repr(self) -> str:
            return f"{self.fused}[{self.index}/{self.parts}]"

    return FusedSlice


#: Fused linear -> the projections diffusers' ``fuse_projections`` concatenated into it, in order.
_FUSED_PARTS: dict[str, tuple[str, ...]] = {
    "to_qkv": ("to_q", "to_k", "to_v"),
    "to_kv": ("to_k", "to_v"),
    "to_added_qkv": ("add_q_proj", "add_k_proj", "add_v_proj"),
    "to_added_kv": ("add_k_proj", "add_v_proj"),
}


def fuse_qkv(module: Any) -> int:
    """Fuse Q/K/V (or K/V) projections of attention modules whose processor supports it.

    diffusers' ``fuse_projections`` keeps the unfused weights. We replace each unfused projection
    by a weight-free ``FusedSlice`` of the fused linear, so fusing costs no memory while
    every attribute a processor reads stays set (never ``None``) and still computes the same
    projection. Returns the number of attention modules fused.
    """
    import torch

    slice_cls = _fused_slice_class()
    fused = 0
    for attn in list(module.modules()):
        fuse = getattr(attn, "fuse_projections", None)
        if fuse is None or getattr(attn, "fused_projections", False):
            continue
        if not hasattr(attn, "to_k") or getattr(attn, "to_k", None) is None:
            continue
        fuse()
        if not getattr(attn, "fused_projections", False):
            continue
        fused += 1
        for fused_name, parts in _FUSED_PARTS.items():
            target = getattr(attn, fused_name, None)
            if not isinstance(target, torch.nn.Linear):
                continue
            if not all(isinstance(getattr(attn, p, None), torch.nn.Linear) for p in parts):
                continue  # not the layout we know: keep the unfused weights
            if target.out_features != sum(getattr(attn, p).out_features for p in parts):
                continue
            if len({getattr(attn, p).out_features for p in parts}) != 1:
                continue  # unequal widths: a row slice per projection would be wrong
            for index, name in enumerate(parts):
                setattr(attn, name, slice_cls(attn, fused_name, index, len(parts)))
    return fused
