"""Measuring one workload: its reference (eager, then compiled), then omni's modes, one by one.

Every mode loads the same checkpoint folder and serves the same request (same seed); only one
mode's models are alive at a time (the previous ones are released first), so peak memory is
the mode's own. The eager reference always runs, at least once: its output is the baseline of
every PSNR. omni's modes go through ``Omni(folder, ...)``, the loader and request path that
``omni serve`` uses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_core.bench.measure import (
    GIB,
    Series,
    baseline_fields,
    psnr_fields,
    release,
    run_series,
)
from omni_core.bench.report import ResultFile, add_speedups
from omni_core.bench.workload import Workload

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from omni_core.contract.platforms import Platform
    from omni_core.contract.registry import BenchmarkSpec

REFERENCE_MODES = ("diffusers", "diffusers-compiled")


@dataclass
class _Case:
    """One workload being measured: what every row of it shares."""

    spec: BenchmarkSpec
    workload: Workload
    folder: Path
    request: dict[str, Any]
    base: dict[str, Any]
    rows: list[dict[str, Any]]


@dataclass
class Session:
    """The device, the modes and the result file of a run; :meth:`measure` does one workload."""

    platform: Platform
    device: Any
    dtype: Any
    modes: tuple[str, ...]
    result: ResultFile
    reps: int = 3
    quantizer: str = "fp8"
    compile_backend: str | None = None
    log: Callable[[str], None] = print

    def measure(
        self, spec: BenchmarkSpec, workload: Workload, checkpoint: dict, *, steps: int | None
    ) -> None:
        """Every selected mode of ``workload`` on the folder ``checkpoint`` describes."""
        verb = "reused" if checkpoint["reused"] else f"built in {checkpoint['build_s']} s"
        self.log(f"[{spec.name}] checkpoint {checkpoint['path']} ({verb})")
        request = dict(workload.request())
        if steps:
            request["num_inference_steps"] = steps
        base = {
            "workload": spec.name,
            "pipeline": spec.pipeline,
            "plugin": spec.plugin,
            "layers": workload.layers,
            "request": request,
            "checkpoint": checkpoint,
            "device": self.result.meta["device"],
            "dtype": self.result.meta["dtype"],
            "command": self.result.meta["command"],
        }
        case = _Case(spec, workload, Path(checkpoint["path"]), request, base, [])
        try:
            baseline = self._reference(case)
            omni_frames: np.ndarray | None = None
            for mode in (m for m in self.modes if m.startswith("omni")):
                frames = self._omni(case, mode, baseline, omni_frames)
                if mode == "omni":
                    omni_frames = frames
        finally:
            add_speedups(case.rows)
            self.result.write()

    def add(self, row: dict[str, Any], rows: list[dict[str, Any]] | None = None) -> None:
        """Record ``row`` (the file is rewritten at once) and log one line about it."""
        if rows is not None:
            rows.append(row)
        self.result.add(row)
        if row.get("error"):
            self.log(f"[{row['workload']}] {row['mode']}: FAILED {row['error']}")
            return
        self.log(
            f"[{row['workload']}] {row['mode']}: load {row['load_s']} s, first "
            f"{row['first_request_s']} s, request {row['request_s']} s, peak "
            f"{row['peak_memory_gib']} GiB, PSNR {row.get('psnr_vs_diffusers_db')}"
        )

    def _row(self, case: _Case, mode: str, series: Series, **extra: Any) -> dict[str, Any]:
        row = {**case.base, "mode": mode, **extra, **series.summary()}
        if row["peak_memory_gib"] is None:
            row["peak_memory_note"] = f"platform {self.platform.name!r} reports no device memory"
        return row

    def _loaded(self, load: Callable[[], Any]) -> tuple[Any, float, float | None]:
        """(what ``load`` returned, its seconds, device memory allocated after it in GiB)."""
        self.platform.synchronize(self.device)
        t0 = time.perf_counter()
        value = load()
        self.platform.synchronize(self.device)
        seconds = round(time.perf_counter() - t0, 3)
        allocated = self.platform.memory_stats(self.device).get("allocated_bytes")
        return value, seconds, round(allocated / GIB, 3) if allocated is not None else None

    def _reference(self, case: _Case) -> np.ndarray | None:
        """The eager reference (always: it is the PSNR baseline), then the compiled one."""
        w, chosen = case.workload, [m for m in self.modes if m in REFERENCE_MODES]
        mode, reference, baseline = "diffusers", None, None
        try:
            reference, load_s, resident = self._loaded(
                lambda: w.load_reference(case.folder, self.device, self.dtype)
            )

            def call(clock: Any) -> Any:
                return w.run_reference(reference, case.request, clock)

            reps = self.reps if "diffusers" in chosen else 0
            eager = run_series(self.platform, self.device, call, reps)
            baseline = w.reference_frames(eager.last_value)
            common = {
                "backend": "diffusers",
                "lossy": False,
                "load_s": load_s,
                "resident_memory_gib": resident,
            }
            if "diffusers" in chosen:
                self.add(
                    self._row(case, mode, eager, **common, **baseline_fields(baseline)), case.rows
                )
            if "diffusers-compiled" in chosen:
                mode = "diffusers-compiled"
                t0 = time.perf_counter()
                w.compile_reference(reference, backend=self.compile_backend)
                setup = round(time.perf_counter() - t0, 3)
                series = run_series(self.platform, self.device, call, self.reps)
                fields = psnr_fields(baseline, w.reference_frames(series.last_value), "diffusers")
                note = "the eager row's load (same object); compiling is in the first request"
                row = self._row(
                    case, mode, series, **common, compile_setup_s=setup, load_note=note, **fields
                )
                self.add(row, case.rows)
        except Exception as exc:  # noqa: BLE001 - the failure is a row; the run goes on
            self.add(
                {**case.base, "mode": mode, "backend": "diffusers", "error": _error(exc)}, case.rows
            )
        finally:
            reference = None
            release()
        return baseline

    def _omni(
        self, case: _Case, mode: str, baseline: np.ndarray | None, omni_frames: np.ndarray | None
    ) -> np.ndarray | None:
        """One of omni's modes through ``Omni(folder, ...)``; returns its frames."""
        from omni_core.api import Omni

        kwargs: dict[str, Any] = {}
        if mode == "omni-fp8":  # the fp8 mode: fp8 linears and fp8 attention on heavy roles
            kwargs.update(fp8=True, quantization=self.quantizer)
        elif mode.startswith("omni-cache:"):
            kwargs["cache"] = mode.removeprefix("omni-cache:")
        if self.compile_backend:
            kwargs["compile_backend"] = self.compile_backend
        omni: Any = None
        try:
            omni, load_s, resident = self._loaded(
                lambda: Omni(case.folder, device=str(self.device), dtype=self.dtype, **kwargs)
            )

            def call(clock: Any) -> Any:
                return omni.generate(progress=clock, **case.request)

            series = run_series(self.platform, self.device, call, self.reps)
            result = series.last_value
            frames = case.workload.omni_frames(result)
            router = omni.options.attention
            extra: dict[str, Any] = {
                "backend": "omni",
                "lossy": mode != "omni",
                "omni_options": dict(kwargs),
                "loaded_pipeline": omni.spec.name,
                "attention_backends": dict(router.names) if router is not None else {},
                "load_s": load_s,
                "resident_memory_gib": resident,
                **psnr_fields(baseline, frames, "diffusers"),
                "omni_timings": {k: round(v, 4) for k, v in result.timings.items()},
                "omni_info": result.info,
            }
            if mode != "omni":
                extra.update(psnr_fields(omni_frames, frames, "omni"))
            if omni.spec.name != case.spec.pipeline:
                extra["pipeline_note"] = (
                    f"Omni(folder) loaded {omni.spec.name!r}; the benchmark names "
                    f"{case.spec.pipeline!r}"
                )
            self.add(self._row(case, mode, series, **extra), case.rows)
            return frames
        except Exception as exc:  # noqa: BLE001 - the failure is a row; the run goes on
            self.add(
                {**case.base, "mode": mode, "backend": "omni", "error": _error(exc)}, case.rows
            )
            return None
        finally:
            if omni is not None:
                omni.close()
            omni = None
            release()


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:800]


__all__ = ["REFERENCE_MODES", "Session"]
