"""Timing, memory and output comparison for the runner, all through the current platform.

Every timed region starts and ends with ``platform.synchronize`` so queued device work is
counted; peak memory is the platform's ``peak_allocated_bytes`` (None where the platform cannot
tell, e.g. on CPU). The step clock synchronises once per denoising step on both sides (omni's
``progress`` callback, diffusers' ``callback_on_step_end``), so per-step times are comparable.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from omni_core.contract.platforms import Platform

GIB = 2**30
#: PSNR reported for identical outputs (the true value is infinite; JSON has no infinity).
PSNR_IDENTICAL = 100.0


@dataclass
class StepClock:
    """Records the time after each denoising step (synchronised); callable with any args."""

    platform: Platform
    device: Any
    stamps: list[float] = field(default_factory=list)

    def __call__(self, *_args: Any) -> None:
        self.platform.synchronize(self.device)
        self.stamps.append(time.perf_counter())

    def reset(self) -> None:
        self.stamps.clear()

    @property
    def sec_per_step(self) -> float | None:
        """Mean interval between step ends (the first step's start is not observable)."""
        if len(self.stamps) < 2:
            return None
        return (self.stamps[-1] - self.stamps[0]) / (len(self.stamps) - 1)


@dataclass
class Timed:
    """One timed call: its value, seconds, peak device bytes, seconds per step."""

    value: Any
    seconds: float
    peak_bytes: int | None
    sec_per_step: float | None


def timed(platform: Platform, device: Any, fn: Callable[[], Any], clock: StepClock) -> Timed:
    """Run ``fn`` between two synchronisations, with the peak-memory counter reset first."""
    platform.synchronize(device)
    platform.reset_peak_memory(device)
    clock.reset()
    t0 = time.perf_counter()
    value = fn()
    platform.synchronize(device)
    seconds = time.perf_counter() - t0
    peak = platform.memory_stats(device).get("peak_allocated_bytes")
    return Timed(value, seconds, peak, clock.sec_per_step)


@dataclass
class Series:
    """The first request and the steady-state repetitions of one mode."""

    first: Timed
    reps: list[Timed]

    @property
    def last_value(self) -> Any:
        return (self.reps or [self.first])[-1].value

    def summary(self) -> dict[str, Any]:
        steady = self.reps or [self.first]
        peaks = [t.peak_bytes for t in steady if t.peak_bytes is not None]
        steps = [t.sec_per_step for t in steady if t.sec_per_step is not None]
        return {
            "first_request_s": _r(self.first.seconds),
            "request_s": _r(statistics.median(t.seconds for t in steady)),
            "request_s_all": [_r(t.seconds) for t in steady],
            # 0: no steady-state request ran; ``request_s`` is then the first request's.
            "reps": len(self.reps),
            "sec_per_step": _r(statistics.median(steps)) if steps else None,
            "peak_memory_gib": round(max(peaks) / GIB, 3) if peaks else None,
            "peak_memory_first_gib": (
                round(self.first.peak_bytes / GIB, 3) if self.first.peak_bytes is not None else None
            ),
        }


def run_series(
    platform: Platform, device: Any, fn: Callable[[StepClock], Any], reps: int
) -> Series:
    """``fn(clock)`` once (first request: compile, caches), then ``reps`` timed repetitions."""
    clock = StepClock(platform, device)
    first = timed(platform, device, lambda: fn(clock), clock)
    steady: list[Timed] = []
    for _ in range(reps):
        (steady or [first])[-1].value = None  # keep one output (a 720p video is ~1 GiB)
        steady.append(timed(platform, device, lambda: fn(clock), clock))
    return Series(first, steady)


def compare(reference: np.ndarray, output: np.ndarray) -> dict[str, Any]:
    """PSNR (dB, uint8 range) and max/mean absolute difference of two frame stacks."""
    import numpy as np

    if reference.shape != output.shape:
        return {"error": f"output shape {output.shape} != reference {reference.shape}"}
    diff = np.abs(reference.astype(np.int16) - output.astype(np.int16))
    mse = float(np.mean(diff.astype(np.float64) ** 2))
    psnr = PSNR_IDENTICAL if mse == 0 else min(10 * math.log10(255.0**2 / mse), PSNR_IDENTICAL)
    return {
        "psnr_db": round(psnr, 2),
        "max_abs_diff": int(diff.max()) if diff.size else 0,
        "mean_abs_diff": round(float(diff.mean()), 4) if diff.size else 0.0,
    }


def psnr_fields(reference: np.ndarray | None, frames: np.ndarray, against: str) -> dict[str, Any]:
    """Row fields comparing ``frames`` with ``reference`` (named ``..._vs_{against}``)."""
    if reference is None:
        return {f"psnr_vs_{against}_db": None}
    facts = compare(reference, frames)
    if "error" in facts:
        return {f"psnr_vs_{against}_db": None, f"compare_vs_{against}_error": facts["error"]}
    if reference.size and float(reference.std()) == 0.0 and facts["max_abs_diff"] == 0:
        # two constant outputs (a random checkpoint that overflowed to NaN decodes to zeros)
        # agree without saying anything about the mode's error: no PSNR rather than 100 dB
        return {
            f"psnr_vs_{against}_db": None,
            f"compare_vs_{against}_error": "both outputs are the same constant image (std 0): "
            "the comparison says nothing about this mode's error",
        }
    return {
        f"psnr_vs_{against}_db": facts["psnr_db"],
        f"max_abs_diff_vs_{against}": facts["max_abs_diff"],
        f"mean_abs_diff_vs_{against}": facts["mean_abs_diff"],
    }


def baseline_fields(frames: np.ndarray) -> dict[str, Any]:
    """Shape and spread of the baseline: a constant output would make every PSNR meaningless."""
    return {
        "output_shape": list(frames.shape),
        "output_std": round(float(frames.std()), 3),
        "psnr_vs_diffusers_db": None,
        "psnr_note": "this is the baseline",
    }


def release() -> None:
    """Drop what a finished mode left: Python garbage and torch.compile's cached graphs."""
    gc.collect()
    try:
        import torch

        torch._dynamo.reset()
    except Exception:  # noqa: BLE001 - no dynamo in this torch: nothing cached
        pass
    gc.collect()


def _r(value: float) -> float:
    """Round to 4 significant digits (small CPU timings stay non-zero)."""
    return float(f"{value:.4g}")


__all__ = [
    "GIB",
    "PSNR_IDENTICAL",
    "Series",
    "StepClock",
    "Timed",
    "baseline_fields",
    "compare",
    "psnr_fields",
    "release",
    "run_series",
    "timed",
]
