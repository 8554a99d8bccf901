"""Scheduler tables: a diffusers scheduler's update, precomputed so ``step()`` never syncs.

The multistep solvers diffusion pipelines use (flow-match Euler, UniPC, DPM-Solver++ without
thresholding or noise) update the latents *linearly*: the next sample is a fixed combination of
recent samples and recent model outputs, with weights that depend on the schedule only. So in
``prepare`` we run the checkpoint's own diffusers scheduler once on probe vectors (a one-hot
basis, which yields the weights exactly) and fit, per step, the smallest recurrence

    x[n+1] = sum_k a[n][k] * x[n-k]  +  sum_j b[n][j] * v[n-j]

with host floats. ``step()`` then applies it with a few fused multiply-adds on the device: no
scheduler object, no ``.item()``, no branching on tensor values, and identical maths to the
reference (checked against the real scheduler on random data before the table is used).
A scheduler that is not linear (stochastic sampling, thresholding) is refused with a clear error.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import torch

_TRIES = ((1, 1), (1, 2), (2, 1), (2, 2), (1, 3), (2, 3), (3, 3), (3, 4), (4, 4))


@dataclass(frozen=True)
class ScheduleTable:
    """Timesteps, sigmas and the per-step linear update of one scheduler configuration."""

    timesteps: tuple[float, ...]
    sigmas: tuple[float, ...]
    #: sample_weights[n][k] multiplies x[n-k]; output_weights[n][j] multiplies v[n-j].
    sample_weights: tuple[tuple[float, ...], ...]
    output_weights: tuple[tuple[float, ...], ...]
    num_train_timesteps: int

    @property
    def num_steps(self) -> int:
        return len(self.timesteps)

    @property
    def sample_history(self) -> int:
        """How many past samples a state must keep (including the current one)."""
        return max((len(w) for w in self.sample_weights), default=1)

    @property
    def output_history(self) -> int:
        """How many past model outputs a state must keep (including the current one)."""
        return max((len(w) for w in self.output_weights), default=1)

    @classmethod
    def from_scheduler(
        cls, scheduler: Any, num_inference_steps: int, **set_timesteps_kwargs: Any
    ) -> ScheduleTable:
        """Probe a (copy of a) diffusers scheduler; ``scheduler`` itself is not modified."""
        import numpy as np
        import torch

        config = getattr(scheduler, "config", {})
        for flag in ("thresholding", "stochastic_sampling"):
            if config.get(flag, False):
                raise ConfigError(
                    f"scheduler {type(scheduler).__name__} with {flag}=True is not a linear "
                    "update; omni's staged runtime cannot precompute it"
                )
        probe = copy.deepcopy(scheduler)
        probe.set_timesteps(num_inference_steps, device="cpu", **set_timesteps_kwargs)
        timesteps = probe.timesteps
        n_steps = len(timesteps)
        dim = 1 + n_steps
        if hasattr(probe, "set_begin_index"):
            probe.set_begin_index(0)
        # Shape [1, dim, 1]: schedulers expect (batch, channels, ...) layouts.
        sample = torch.zeros(1, dim, 1, dtype=torch.float64)
        sample[0, 0] = 1.0
        coeffs = [sample.flatten().numpy().copy()]
        for n, t in enumerate(timesteps):
            output = torch.zeros(1, dim, 1, dtype=torch.float64)
            output[0, 1 + n] = 1.0
            sample = probe.step(output, t, sample, return_dict=False)[0].to(torch.float64)
            coeffs.append(sample.flatten().numpy().copy())
        sample_w, output_w = _fit(np.stack(coeffs))
        sigmas = getattr(probe, "sigmas", None)
        table = cls(
            timesteps=tuple(float(t) for t in timesteps),
            sigmas=tuple(float(s) for s in sigmas[:n_steps]) if sigmas is not None else (),
            sample_weights=sample_w,
            output_weights=output_w,
            num_train_timesteps=int(config.get("num_train_timesteps", 1000)),
        )
        table._verify(scheduler, num_inference_steps, set_timesteps_kwargs)
        return table

    def timesteps_tensor(self, device: Any, dtype: Any = None) -> torch.Tensor:
        """The timesteps on ``device`` (one host-to-device copy, made in prepare)."""
        import torch

        return torch.tensor(self.timesteps, device=device, dtype=dtype or torch.float32)

    def apply(
        self, n: int, samples: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]
    ) -> torch.Tensor:
        """x[n+1] from ``samples`` = [x[n], x[n-1], ...] and ``outputs`` = [v[n], v[n-1], ...].

        Pure device arithmetic with host floats: no synchronisation.
        """
        result: torch.Tensor | None = None
        for weight, tensor in zip(
            (*self.sample_weights[n], *self.output_weights[n]),
            (*samples[: len(self.sample_weights[n])], *outputs[: len(self.output_weights[n])]),
            strict=True,
        ):
            if weight == 0.0:
                continue
            result = tensor * weight if result is None else result.add_(tensor, alpha=weight)
        if result is None:
            import torch

            return torch.zeros_like(samples[0])
        return result

    def _verify(self, scheduler: Any, steps: int, kwargs: dict[str, Any]) -> None:
        import torch

        reference = copy.deepcopy(scheduler)
        reference.set_timesteps(steps, device="cpu", **kwargs)
        if hasattr(reference, "set_begin_index"):
            reference.set_begin_index(0)
        gen = torch.Generator("cpu").manual_seed(0)
        x = torch.randn(1, 16, 4, generator=gen, dtype=torch.float64)
        ref = x.clone()
        samples, outputs = [x], []
        for n, t in enumerate(reference.timesteps):
            v = torch.randn(1, 16, 4, generator=gen, dtype=torch.float64)
            ref = reference.step(v, t, ref, return_dict=False)[0].to(torch.float64)
            outputs.insert(0, v)
            samples.insert(0, self.apply(n, samples, outputs))
            del samples[self.sample_history :], outputs[self.output_history :]
        error = float((samples[0] - ref).abs().max())
        scale = float(ref.abs().max()) + 1.0
        if not error <= 1e-5 * scale:
            raise ConfigError(
                f"scheduler {type(scheduler).__name__} does not follow a linear update "
                f"(table error {error:.3g}); omni's staged runtime cannot precompute it"
            )


def _fit(coeffs: Any) -> tuple[tuple[tuple[float, ...], ...], tuple[tuple[float, ...], ...]]:
    """Smallest (samples, outputs) recurrence that reproduces every probed step exactly."""
    import numpy as np

    n_steps = coeffs.shape[0] - 1
    dim = coeffs.shape[1]
    for k_max, w_max in (*_TRIES, (1, n_steps)):
        sample_w: list[tuple[float, ...]] = []
        output_w: list[tuple[float, ...]] = []
        for n in range(n_steps):
            k = min(k_max, n + 1)
            w = min(w_max, n + 1)
            basis = [coeffs[n - i] for i in range(k)]
            for j in range(w):
                unit = np.zeros(dim)
                unit[1 + n - j] = 1.0
                basis.append(unit)
            matrix = np.stack(basis, axis=1)
            target = coeffs[n + 1]
            solution, *_ = np.linalg.lstsq(matrix, target, rcond=None)
            if np.abs(matrix @ solution - target).max() > 1e-6 * (np.abs(target).max() + 1.0):
                break
            solution = np.where(np.abs(solution) < 1e-15, 0.0, solution)
            sample_w.append(tuple(float(s) for s in solution[:k]))
            output_w.append(tuple(float(s) for s in solution[k:]))
        else:
            return tuple(sample_w), tuple(output_w)
    raise ConfigError("could not fit the scheduler's update as a linear recurrence")
