"""The server's run-time estimate asks the pipeline how much work a request is
(``Pipeline.work_units``, the contract): Wan counts the latent frames its transformer denoises
((frames - 1) / 4 + 1), not the decoded frames, so long clips are not over-estimated."""

from __future__ import annotations

from typing import Any


def test_wan_work_is_pixel_steps_over_latent_frames(omni_wan_model: Any) -> None:
    from omni_core import GenerationRequest

    pipeline = omni_wan_model("t2v").pipeline

    def work(frames: int, n: int = 1) -> float | None:
        request = GenerationRequest(
            prompt="a lake",
            width=32,
            height=16,
            num_frames=frames,
            num_inference_steps=4,
            num_outputs=n,
        )
        return pipeline.work_units(request)

    assert work(5) == 32 * 16 * 2 * 4  # 5 frames: 2 latent frames
    assert work(241) == 32 * 16 * 61 * 4  # 61 latent frames, 30.5 times the 5-frame clip
    assert work(9, n=2) == 2 * work(9)
    assert pipeline.work_units(GenerationRequest(prompt="no size")) is None
