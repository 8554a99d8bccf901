"""The real-size Qwen-Image benchmark checkpoint's scheduler: finite sigmas at 1024x1024.

With the tiny builder's resolution shift (4 to 64 image tokens) a 1024x1024 request (4096
tokens) extrapolates to a shift of ~28 and every sigma is NaN, which made every mode of the
committed H200 run decode the same black image.
"""

from __future__ import annotations

import numpy as np
import pytest


def _sigmas(folder):
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.pipelines.qwenimage.pipeline_qwenimage import calculate_shift

    scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(folder)
    config = scheduler.config
    mu = calculate_shift(
        (1024 // 16) ** 2,
        config.base_image_seq_len,
        config.max_image_seq_len,
        config.base_shift,
        config.max_shift,
    )
    with np.errstate(all="ignore"):
        scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / 50, 50), mu=mu)
    return scheduler.sigmas


def test_real_scheduler_gives_finite_sigmas_at_1024(tmp_path):
    from omni_qwen.bench import _write_real_scheduler
    from omni_qwen.testing import build_tiny_qwen_image

    build_tiny_qwen_image(tmp_path, "t2i")
    tiny = _sigmas(tmp_path / "scheduler")
    assert bool(tiny.isnan().any())  # the tiny shift does not reach 1024x1024

    _write_real_scheduler(tmp_path / "scheduler")
    sigmas = _sigmas(tmp_path / "scheduler")
    assert bool(sigmas.isfinite().all())
    assert float(sigmas[0]) == pytest.approx(1.0)
    assert float(sigmas[-2]) == pytest.approx(0.02)  # Qwen-Image's shift_terminal
    assert bool((sigmas[:-1] > sigmas[1:]).all())
