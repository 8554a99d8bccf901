"""ScheduleTable reproduces diffusers' schedulers exactly, with no scheduler object in step()."""

from __future__ import annotations

import pytest
import torch

from omni_core.contract.errors import ConfigError
from omni_core.diffusion.schedule import ScheduleTable


def _schedulers() -> list:
    from diffusers import (
        DPMSolverMultistepScheduler,
        FlowMatchEulerDiscreteScheduler,
        UniPCMultistepScheduler,
    )

    return [
        pytest.param(
            UniPCMultistepScheduler(
                prediction_type="flow_prediction",
                use_flow_sigmas=True,
                num_train_timesteps=1000,
                flow_shift=3.0,
            ),
            id="unipc-flow (Wan)",
        ),
        pytest.param(FlowMatchEulerDiscreteScheduler(shift=3.0), id="flow-match-euler"),
        pytest.param(DPMSolverMultistepScheduler(), id="dpm-solver++"),
        pytest.param(UniPCMultistepScheduler(), id="unipc-eps"),
    ]


@pytest.mark.parametrize("scheduler", _schedulers())
@pytest.mark.parametrize("steps", [1, 4, 20])
def test_runtime_table_matches_scheduler(scheduler: object, steps: int) -> None:
    table = ScheduleTable.from_scheduler(scheduler, steps)
    reference = type(scheduler).from_config(scheduler.config)  # type: ignore[attr-defined]
    reference.set_timesteps(steps)
    assert table.num_steps == len(reference.timesteps)
    assert table.timesteps == tuple(float(t) for t in reference.timesteps)

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 3, 5, generator=gen)
    ref = x.clone()
    samples, outputs = [x], []
    for n, t in enumerate(reference.timesteps):
        v = torch.randn(2, 4, 3, 5, generator=gen)
        ref = reference.step(v, t, ref, return_dict=False)[0]
        outputs.insert(0, v)
        samples.insert(0, table.apply(n, samples, outputs))
        del samples[table.sample_history :]
        del outputs[max(table.output_history - 1, 0) :]
    torch.testing.assert_close(samples[0], ref, rtol=1e-5, atol=1e-5)


def test_runtime_table_keeps_short_histories() -> None:
    """Euler needs only x[n] and v[n]; Wan's UniPC a few: never the whole trajectory."""
    from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler

    euler = ScheduleTable.from_scheduler(FlowMatchEulerDiscreteScheduler(), 50)
    assert (euler.sample_history, euler.output_history) == (1, 1)
    unipc = ScheduleTable.from_scheduler(
        UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True), 50
    )
    assert unipc.sample_history <= 4 and unipc.output_history <= 4


def test_runtime_table_does_not_touch_the_scheduler() -> None:
    from diffusers import UniPCMultistepScheduler

    scheduler = UniPCMultistepScheduler()
    ScheduleTable.from_scheduler(scheduler, 10)
    assert scheduler.num_inference_steps is None


def test_runtime_table_refuses_nonlinear_schedulers() -> None:
    from diffusers import DPMSolverMultistepScheduler, FlowMatchEulerDiscreteScheduler

    with pytest.raises(ConfigError, match="thresholding"):
        ScheduleTable.from_scheduler(DPMSolverMultistepScheduler(thresholding=True), 4)
    with pytest.raises(ConfigError, match="stochastic_sampling"):
        ScheduleTable.from_scheduler(FlowMatchEulerDiscreteScheduler(stochastic_sampling=True), 4)
