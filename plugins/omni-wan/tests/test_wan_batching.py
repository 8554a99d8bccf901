"""Step-level batching: one step() over several requests equals the single runs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


def _max_diff(a: np.ndarray, b: np.ndarray) -> int:
    assert a.shape == b.shape
    return int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max())


@pytest.mark.parametrize("variant", ["t2v", "i2v", "ti2v"])
def test_wan_batched_step_equals_single_runs(
    variant: str, omni_wan_model: Any, wan_kwargs: Any, cond_image: Any
) -> None:
    model = omni_wan_model(variant)
    extra: dict[str, Any] = {"images": [cond_image]} if variant != "t2v" else {}
    first = wan_kwargs(variant, prompt="a red car drives at night", seed=3, **extra)
    second = wan_kwargs(
        variant,
        prompt="waves crash on a rocky shore",
        negative_prompt="",
        guidance_scale=6.0,
        seed=11,
        **extra,
    )

    calls: list[int] = []
    step = model.pipeline.step

    def spy(states: list[Any]) -> None:
        calls.append(len(states))
        step(states)

    model.pipeline.step = spy
    try:
        batched = model.generate_batch([first, second])
    finally:
        del model.pipeline.step
    assert calls == [2] * first["num_inference_steps"], "the two requests did not share steps"

    singles = [model.generate(**first), model.generate(**second)]
    for together, alone in zip(batched, singles, strict=True):
        assert _max_diff(together.video, alone.video) <= 1
    # Different prompts and seeds give different videos (the batch did not mix them up).
    assert _max_diff(batched[0].video, batched[1].video) > 10


def test_wan_incompatible_requests_step_separately(omni_wan_model: Any, wan_kwargs: Any) -> None:
    model = omni_wan_model("t2v")
    small = wan_kwargs("t2v", seed=1, num_inference_steps=2)
    other = wan_kwargs("t2v", seed=1, num_inference_steps=2, num_frames=5)
    calls: list[int] = []
    step = model.pipeline.step

    def spy(states: list[Any]) -> None:
        calls.append(len(states))
        step(states)

    model.pipeline.step = spy
    try:
        results = model.generate_batch([small, other])
    finally:
        del model.pipeline.step
    assert calls == [1, 1, 1, 1]
    assert results[0].video.shape[0] == 9 and results[1].video.shape[0] == 5


def test_wan_step_has_no_host_sync(omni_wan_model: Any, wan_kwargs: Any) -> None:
    """step() never reads a tensor value on the host (checked with torch's sync debug mode
    where it can see it, and by forbidding .item()/.tolist()/bool() on tensors)."""
    import torch

    model = omni_wan_model("t2v-a14b")
    pipe = model.pipeline
    state = pipe.prepare(model.request(**wan_kwargs("t2v-a14b"), seed=5))
    other = pipe.prepare(model.request(**wan_kwargs("t2v-a14b", guidance_scale=7.0), seed=6))
    forbidden = []
    originals = {name: getattr(torch.Tensor, name) for name in ("item", "tolist", "__bool__")}

    def trap(name: str) -> Any:
        def method(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            forbidden.append(name)
            return originals[name](self, *args, **kwargs)

        return method

    for name in originals:
        setattr(torch.Tensor, name, trap(name))
    try:
        pipe.step([state])  # then both together: staggered, different guidance, two experts
        while not other.done:
            group = [s for s in (state, other) if not s.done]
            keys = {pipe.batch_key(s) for s in group}
            for key in keys:
                pipe.step([s for s in group if pipe.batch_key(s) == key])
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
    assert forbidden == []


def test_wan_progress_and_cancellation(omni_wan_model: Any, wan_kwargs: Any) -> None:
    from omni_core.runtime import RequestCancelledError

    model = omni_wan_model("t2v")
    seen: list[tuple[int, int]] = []
    model.generate(**wan_kwargs("t2v", seed=2), progress=lambda rid, d, t: seen.append((d, t)))
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]

    steps: list[int] = []
    with pytest.raises(RequestCancelledError):
        model.generate(
            **wan_kwargs("t2v", seed=2),
            progress=lambda rid, d, t: steps.append(d),
            should_cancel=lambda rid: len(steps) >= 2,
        )
    assert steps == [1, 2]


@pytest.mark.parametrize("variant", ["t2v", "ti2v"])
def test_wan_staggered_requests_share_steps(
    variant: str, omni_wan_model: Any, wan_kwargs: Any, cond_image: Any
) -> None:
    """Continuous batching: a request that arrives two steps later joins the running one;
    each sample keeps its own timestep, guidance and scheduler history."""
    model = omni_wan_model(variant)
    pipe = model.pipeline
    extra: dict[str, Any] = {"images": [cond_image]} if variant == "ti2v" else {}
    first = wan_kwargs(variant, prompt="a red car drives at night", seed=3, **extra)
    second = wan_kwargs(variant, prompt="waves on a shore", seed=4, guidance_scale=6.0, **extra)
    early = pipe.prepare(model.request(**first))
    pipe.step([early])
    pipe.step([early])
    late = pipe.prepare(model.request(**second))
    assert pipe.batch_key(early) == pipe.batch_key(late)
    while not early.done:
        pipe.step([early, late])  # early at steps 2, 3; late at 0, 1
    while not late.done:
        pipe.step([late])
    together = [pipe.decode(early).video, pipe.decode(late).video]
    alone = [model.generate(**first).video, model.generate(**second).video]
    for a, b in zip(together, alone, strict=True):
        assert _max_diff(a, b) <= 1
