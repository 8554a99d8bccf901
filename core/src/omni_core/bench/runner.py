"""Run registered workloads: the reference (eager, compiled) and ``Omni(folder)``, in one process.

For each selected workload the checkpoint folder is built once (cached under the work dir by
:attr:`Workload.key`), then every mode loads it and serves the workload's request:

``diffusers``
    the workload's reference pipeline, eager (its output is the baseline of every PSNR);
``diffusers-compiled``
    the same pipeline after :meth:`Workload.compile_reference` (diffusers' own regional compile);
``omni``
    ``Omni(folder)`` with its defaults, i.e. what ``omni serve`` loads (fused QKV, regional
    compile on accelerators, automatic attention backend, CFG batched);
``omni-fp8`` / ``omni-cache:NAME``
    lossy variants, PSNR also against ``omni`` (``psnr_vs_omni_db``): the fp8 mode
    (``Omni(folder, fp8=True)``: fp8 linears with ``--quantizer``, fp8 attention on the heavy
    roles); a registered step cache.

Each mode reports load seconds, the first request (compile and warm-up included), the median of
``reps`` steady-state requests, seconds per denoising step, peak device memory and PSNR against
the eager reference. A mode that fails becomes a row with ``error``; the run goes on.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_core.bench.checkpoints import default_work_dir, ensure_checkpoint
from omni_core.bench.modes import REFERENCE_MODES, Session
from omni_core.bench.report import ResultFile, device_name
from omni_core.bench.workload import Workload
from omni_core.contract.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.platforms import Platform
    from omni_core.contract.registry import BenchmarkSpec, Registry

#: Modes measured when none are asked for (accelerators; on CPU the compiled one is skipped).
DEFAULT_MODES = ("diffusers", "diffusers-compiled", "omni")
CPU_DEFAULT_MODES = ("diffusers", "omni")


@dataclass
class BenchOptions:
    """How to run: modes, repetitions, where folders and results go, size overrides."""

    out: Path = Path("pipeline-bench.json")
    work_dir: Path = field(default_factory=default_work_dir)
    #: None: :data:`DEFAULT_MODES` (:data:`CPU_DEFAULT_MODES` on CPU).
    modes: tuple[str, ...] | None = None
    reps: int = 3
    #: Transformer blocks to build (None: the real count); reported in every row.
    layers: int | None = None
    #: Override of the request's ``num_inference_steps``.
    steps: int | None = None
    device: str | None = None
    dtype: str | None = None
    quantizer: str = "fp8"
    #: torch.compile backend for the compiled modes (None: inductor).
    compile_backend: str | None = None
    rebuild: bool = False
    keep_checkpoints: bool = True
    command: str = "omni bench pipeline"
    plot: bool = True
    log: Callable[[str], None] = print


def parse_modes(values: Iterable[str]) -> tuple[str, ...]:
    """Comma-separated or repeated mode names, validated, in measuring order."""
    modes = [m.strip() for value in values for m in value.split(",") if m.strip()]
    bad = [
        m
        for m in modes
        if m not in (*REFERENCE_MODES, "omni", "omni-fp8") and not m.startswith("omni-cache:")
    ]
    if bad:
        raise ConfigError(
            f"unknown mode(s) {', '.join(bad)}; known: diffusers, diffusers-compiled, omni, "
            "omni-fp8, omni-cache:NAME"
        )
    order = {m: i for i, m in enumerate((*REFERENCE_MODES, "omni", "omni-fp8"))}
    return tuple(sorted(dict.fromkeys(modes), key=lambda m: order.get(m, len(order))))


def select_workloads(
    registry: Registry, names: Iterable[str] = (), *, tiny: bool = False
) -> list[tuple[BenchmarkSpec, Workload]]:
    """The registered workloads to run: ``names``, else every one whose ``tiny`` flag matches."""
    specs = registry.benchmarks
    names = list(names)
    unknown = [n for n in names if n not in specs]
    if unknown:
        known = ", ".join(specs) or "none (install a model plugin that registers benchmarks)"
        raise ConfigError(f"unknown workload(s) {', '.join(unknown)}; registered: {known}")
    chosen = [specs[n] for n in names] if names else [s for s in specs.values() if s.tiny == tiny]
    out = []
    for spec in chosen:
        workload = spec.load()
        if not isinstance(workload, Workload):
            raise ConfigError(
                f"benchmark {spec.name!r} ({spec.implementation}) is not an "
                "omni_core.bench.Workload"
            )
        out.append((spec, workload))
    return out


def run_benchmark(
    names: Iterable[str] = (),
    *,
    tiny: bool = False,
    options: BenchOptions | None = None,
    registry: Registry | None = None,
) -> list[dict[str, Any]]:
    """Measure the selected workloads; writes ``options.out`` (+ a PNG) and returns the rows."""
    import torch

    from omni_core.contract.dtypes import parse_dtype
    from omni_core.contract.host import get_registry
    from omni_core.contract.platforms import current_platform

    options = options or BenchOptions()
    registry = registry or get_registry()
    platform = current_platform()
    selection = select_workloads(registry, names, tiny=tiny)
    if not selection:
        raise ConfigError("no workload selected: no plugin registers one of this kind")
    device = torch.device(options.device or ("cpu" if tiny else platform.device(0)))
    dtype = parse_dtype(options.dtype, "float32" if device.type == "cpu" else "bfloat16")
    modes = options.modes or (CPU_DEFAULT_MODES if device.type == "cpu" else DEFAULT_MODES)
    _check_modes(modes, registry, options.quantizer, platform)
    result = ResultFile(
        options.out,
        {
            "command": options.command,
            "device": device_name(platform, device),
            "platform": platform.name,
            "dtype": str(dtype).removeprefix("torch."),
            "modes": list(modes),
            "reps": options.reps,
            "work_dir": str(options.work_dir),
        },
    )
    session = Session(
        platform=platform,
        device=device,
        dtype=dtype,
        modes=modes,
        result=result,
        reps=options.reps,
        quantizer=options.quantizer,
        compile_backend=options.compile_backend,
        log=options.log,
    )
    for spec, workload in selection:
        # A tiny workload is a fixed smoke test: ``layers`` applies to real sizes only.
        workload = workload if spec.tiny else workload.with_layers(options.layers)
        try:
            checkpoint = ensure_checkpoint(workload, options.work_dir, rebuild=options.rebuild)
        except Exception as exc:  # noqa: BLE001 - e.g. a full disk: a row, then the next one
            session.add(
                {
                    "workload": spec.name,
                    "mode": "build",
                    "layers": workload.layers,
                    "error": f"{type(exc).__name__}: {exc}"[:800],
                }
            )
            continue
        try:
            session.measure(spec, workload, checkpoint, steps=options.steps)
        finally:
            if not options.keep_checkpoints:
                shutil.rmtree(checkpoint["path"], ignore_errors=True)
    if options.plot:
        from omni_core.bench.plot import write_plot

        plot = write_plot(result.rows, options.out.with_suffix(".png"))
        if plot is not None:
            options.log(f"wrote {plot}")
    options.log(f"wrote {options.out} ({len(result.rows)} rows)")
    return result.rows


def _check_modes(
    modes: Iterable[str], registry: Registry, quantizer: str, platform: Platform
) -> None:
    """Unknown cache backends or quantizers, and omni-fp8 without a usable fp8 attention
    backend, fail now, not after the reference modes ran."""
    from omni_core.contract.fp8_mode import fp8_attention_backend

    for mode in modes:
        name = mode.removeprefix("omni-cache:")
        if mode.startswith("omni-cache:") and name not in registry.cache_backends:
            raise ConfigError(
                f"mode {mode}: no cache backend {name!r}; registered: "
                + ", ".join(registry.cache_backends)
            )
        if mode == "omni-fp8" and quantizer not in registry.quantizers:
            raise ConfigError(
                f"--quantizer {quantizer!r} is not registered; registered: "
                + ", ".join(registry.quantizers)
            )
        if mode == "omni-fp8":
            fp8_attention_backend(registry, platform)


__all__ = [
    "CPU_DEFAULT_MODES",
    "DEFAULT_MODES",
    "BenchOptions",
    "default_work_dir",
    "ensure_checkpoint",
    "parse_modes",
    "run_benchmark",
    "select_workloads",
]
