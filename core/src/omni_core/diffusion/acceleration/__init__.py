"""Acceleration applied to a loaded pipeline's components: quantization, compilation, step cache.

Pipelines call :func:`apply_acceleration` once in ``from_pretrained``, after the components are on
their device, with the modules that may be accelerated::

    self.accel = apply_acceleration(
        {"transformer": self.transformer, "transformer_2": self.transformer_2}, options
    )

and, per denoiser call in ``step``, ``with self.accel.cache_context("transformer", name):`` where
``name`` identifies the request and CFG branch (``f"{request_id}:cond"``); when a request finishes,
``self.accel.finish(names)`` returns its cache hits (put them in ``GenerationResult.info``).

What is allowed comes from ``options.spec`` (the registered PipelineSpec the core is loading:
its capabilities bound the cache backends and quantizers; ``None``, e.g. a pipeline built by
hand, means unrestricted). What each denoiser class needs (its block lists for regional compile
and quantization scope, whether QKV fusion is exact, cache calibration data) is the
:class:`~omni_core.diffusion.denoisers.DenoiserAdapter` its model plugin registered
(:func:`~omni_core.diffusion.denoisers.resolve_denoiser`); an unregistered class gets a generic one.

Order matters and is fixed here: fuse QKV (so the fused projection gets quantized), quantize (so
the compiled graph sees quantized weights), compile the repeated blocks (so the cache hooks wrap
compiled blocks and are not traced into them), then install the step cache.

``options.extra`` keys understood here: ``compile`` (bool, default True on CUDA, False on CPU),
``compile_mode`` (torch.compile mode), ``compile_backend`` (default inductor),
``compile_dynamic`` (bool|None, default False), ``fuse_qkv`` (bool, default True where the
model's adapter allows it).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import ConfigError
from omni_core.diffusion.acceleration.cache import CacheHandle, CacheStats, apply_cache
from omni_core.diffusion.acceleration.compile import (
    CompileReport,
    compile_repeated_blocks,
    fuse_qkv,
)
from omni_core.diffusion.acceleration.quantization import QuantReport, quantize_components
from omni_core.diffusion.denoisers import resolve_denoiser

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.contract.pipeline import PipelineOptions
    from omni_core.contract.registry import Registry

__all__ = [
    "AccelerationReport",
    "CacheHandle",
    "CacheStats",
    "apply_acceleration",
    "cache_key",
]

#: The loading options acceleration reads from ``options.extra`` (every pipeline accepts them).
LOAD_OPTIONS: dict[str, str] = {
    "compile": "compile the repeated blocks (default: on for CUDA, off on CPU)",
    "compile_mode": "torch.compile mode",
    "compile_backend": "torch.compile backend (default inductor)",
    "compile_dynamic": "torch.compile dynamic shapes (default False)",
    "fuse_qkv": "fuse the Q/K/V projections where the denoiser's adapter allows it (default True)",
}

#: The component that gets the step cache and, by default, quantization and compilation.
DENOISERS: tuple[str, ...] = ("transformer", "transformer_2", "unet")


@dataclass
class AccelerationReport:
    """What :func:`apply_acceleration` applied, live (compile times fill in on first calls)."""

    order: list[str] = field(default_factory=list)
    attention: dict[str, str] = field(default_factory=dict)
    fused_qkv: dict[str, int] = field(default_factory=dict)
    quantization: list[QuantReport] = field(default_factory=list)
    compile: list[CompileReport] = field(default_factory=list)
    caches: dict[str, CacheHandle] = field(default_factory=dict)
    setup_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @contextlib.contextmanager
    def cache_context(self, component: str, name: str) -> Iterator[None]:
        """Wrap one denoiser call of ``component`` for request-branch ``name`` (no-op: no cache)."""
        handle = self.caches.get(component)
        if handle is None:
            yield
            return
        with handle.context(name):
            yield

    def finish(self, names: Iterable[str]) -> dict[str, Any]:
        """A request ended: its cache hits per cached component (and drop its cached tensors)."""
        names = list(names)
        out: dict[str, Any] = {}
        for component, handle in self.caches.items():
            stats = handle.finish(names)
            out[component] = {"backend": handle.backend, **stats.as_dict()}
        return out

    def finish_request(self, request_id: str) -> dict[str, Any]:
        """A request ended: hits of every cache context it took part in (see :func:`cache_key`).

        Contexts shared with other requests of the same step batch are dropped too; those
        requests simply recompute their next step (a cold cache), which is always safe.
        """
        out: dict[str, Any] = {}
        for component, handle in self.caches.items():
            names = [k for k in handle.contexts() if request_id in _members(k)]
            stats = handle.finish(names)
            out[component] = {"backend": handle.backend, **stats.as_dict()}
        return out

    def cache_stats(self) -> dict[str, dict[str, Any]]:
        return {c: {"backend": h.backend, **h.stats().as_dict()} for c, h in self.caches.items()}

    @property
    def lossy(self) -> bool:
        return any(h.lossy for h in self.caches.values()) or bool(self.quantization)

    def as_dict(self) -> dict[str, Any]:
        return {
            "order": list(self.order),
            "attention": dict(self.attention),
            "fused_qkv": dict(self.fused_qkv),
            "quantization": [q.as_dict() for q in self.quantization],
            "compile": [c.as_dict() for c in self.compile],
            "cache": {
                c: {"backend": h.backend, "options": h.options, "lossy": h.lossy}
                for c, h in self.caches.items()
            },
            "lossy": self.lossy,
            "setup_s": round(self.setup_s, 3),
            "notes": list(self.notes),
        }


def cache_key(request_ids: Iterable[str], branch: str | int | None = None) -> str:
    """The cache-context name of one denoiser call: the batch's request ids (+ CFG branch).

    Use it in ``step``: ``with accel.cache_context("transformer", cache_key(ids, "cond")):``;
    :meth:`AccelerationReport.finish_request` finds every context a request was part of.
    """
    key = "+".join(request_ids)
    return key if branch is None else f"{key}:{branch}"


def _members(key: str) -> set[str]:
    return set(key.split(":", 1)[0].split("+"))


def _flag(extra: dict[str, Any], key: str, default: Any) -> Any:
    value = extra.get(key, default)
    if isinstance(value, str):
        low = value.strip().lower()
        if low in {"1", "true", "yes", "on"}:
            return True
        if low in {"0", "false", "no", "off"}:
            return False
        if low in {"none", "auto"}:
            return None
    return value


def apply_acceleration(
    components: dict[str, torch.nn.Module | None],
    options: PipelineOptions,
    *,
    registry: Registry | None = None,
) -> AccelerationReport:
    """Apply fused QKV, quantization, regional compile and the step cache, in that order.

    ``components`` maps component names to modules (``None`` entries are ignored, e.g. a missing
    ``transformer_2``). Only denoisers (``transformer``, ``transformer_2``, ``unet``) get
    compilation and the cache; quantization goes to ``options.quantization.components``
    (default ``("transformer",)``; ``transformer_2`` follows ``transformer`` when present).
    ``options.spec``'s capabilities bound the cache backends and quantizers (no spec: any).
    Raises ConfigError before touching anything when a setting cannot be honoured.
    """
    t0 = time.perf_counter()
    registry = registry or options.registry
    report = AccelerationReport()
    present = {k: v for k, v in components.items() if v is not None}
    denoisers = [k for k in present if k in DENOISERS]
    extra = dict(options.extra or {})
    spec = options.spec
    capabilities = spec.capabilities if spec is not None else None
    allowed = tuple(capabilities.cache_backends) if capabilities is not None else ()
    if options.attention is not None:
        report.attention = dict(options.attention.names)

    # Validate everything first: errors before compute, and before any module is changed.
    cache_cfg = options.cache
    if cache_cfg.backend:
        if cache_cfg.backend not in registry.cache_backends:
            known = ", ".join(sorted(registry.cache_backends)) or "none"
            raise ConfigError(
                f"cache.backend: unknown cache backend {cache_cfg.backend!r}; known: {known}"
            )
        if not denoisers:
            raise ConfigError("cache.backend: this pipeline has no denoiser to cache")
        if allowed and cache_cfg.backend not in allowed:
            raise ConfigError(
                f"cache.backend: {cache_cfg.backend!r} is not supported by this pipeline "
                f"(supported: {', '.join(allowed)})"
            )
    quant = options.quantization
    quant_targets: tuple[str, ...] = ()
    if quant.method:
        quant_targets = tuple(quant.components)
        if quant_targets == ("transformer",) and "transformer_2" in present:
            quant_targets = ("transformer", "transformer_2")
        if quant.method not in registry.quantizers:
            known = ", ".join(sorted(registry.quantizers)) or "none"
            raise ConfigError(
                f"quantization.method: unknown quantizer {quant.method!r}; known: {known}"
            )
        allowed_q = tuple(capabilities.quantizers) if capabilities is not None else ()
        if allowed_q and quant.method not in allowed_q:
            raise ConfigError(
                f"quantization.method: {quant.method!r} is not supported by this pipeline "
                f"(supported: {', '.join(allowed_q)})"
            )
    # Per-request LoRA adapters live in PEFT layers on the Q/K/V projections: a fused QKV
    # would bypass them and a quantized base layer would not take them (a fused distill is
    # merged and unloaded before this, so it is plain weights).
    per_request_lora = any(a.name != options.lora.fuse for a in options.lora.adapters)
    if per_request_lora and quant.method:
        raise ConfigError(
            f"quantization.method: {quant.method!r} cannot be combined with per-request LoRA "
            "adapters; fuse the adapter (fuse_lora) or drop the quantization"
        )
    adapters = {name: resolve_denoiser(present[name], registry) for name in denoisers}

    device_type = getattr(options.device, "type", str(options.device))
    if per_request_lora and _flag(extra, "fuse_qkv", True):
        report.notes.append("fused QKV off: per-request LoRA adapters sit on the projections")
    elif _flag(extra, "fuse_qkv", True):
        for name in denoisers:
            if adapters[name].fuse_qkv:
                report.fused_qkv[name] = fuse_qkv(present[name])
        if report.fused_qkv:
            report.order.append("fuse_qkv")

    if quant.method:
        report.quantization = quantize_components(
            present,
            quant.method,
            quant_targets,
            block_lists={n: a.blocks for n, a in adapters.items()},
            registry=registry,
            device_type=device_type,
        )
        report.order.append(f"quantize:{quant.method}")

    if _flag(extra, "compile", device_type == "cuda"):
        mode = extra.get("compile_mode") or None
        dynamic = _flag(extra, "compile_dynamic", False)
        for name in denoisers:
            # A registered adapter names the block lists; for a class nobody registered,
            # diffusers' own ``_repeated_blocks`` declaration comes first.
            registered = registry.denoiser_for(type(present[name]).__name__) is not None
            report.compile.append(
                compile_repeated_blocks(
                    present[name],
                    name,
                    mode=mode,
                    dynamic=dynamic,
                    backend=extra.get("compile_backend") or "inductor",
                    adapter=adapters[name] if registered else None,
                )
            )
        report.order.append("compile")

    if cache_cfg.backend:
        for name in denoisers:
            handle = apply_cache(
                present[name],
                cache_cfg,
                registry=registry,
                allowed=allowed,
                adapter=adapters[name],
            )
            if handle is not None:
                report.caches[name] = handle
        report.order.append(f"cache:{cache_cfg.backend}")
        if any(h.lossy for h in report.caches.values()):
            report.notes.append(
                "lossy step cache: compare with the uncached run "
                "(omni_core.diffusion.acceleration.quality)"
            )
    report.setup_s = time.perf_counter() - t0
    return report
