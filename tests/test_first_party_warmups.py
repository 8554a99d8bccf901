"""Every first-party pipeline declares a warm-up its own ``validate`` accepts, on every kind of
tiny checkpoint it loads (issue 34, point 1): ``omni serve`` without ``--warmup-request`` must
bring each model up. In process and without running a step (the live server runs them:
tests/serving/test_serve_default_warmup.py). And a refused warm-up names its real cause.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .conftest import plugin_module

TINY = plugin_module("tiny_first_party")


def test_every_first_party_pipeline_has_a_tiny_checkpoint() -> None:
    """A pipeline registered by a package of this repository without an entry in the table
    would escape the warm-up tests."""
    assert TINY.first_party_pipelines() == sorted(TINY.TINY)


@pytest.mark.parametrize("pipeline", sorted(TINY.TINY))
def test_first_party_warmup_is_accepted(
    pipeline: str, tiny_first_party: Callable[[Any], str]
) -> None:
    from omni_core import Omni
    from omni_core.contract.requests import warmup_request

    reason = TINY.missing(pipeline)
    if reason:
        pytest.skip(reason)
    for tiny in TINY.TINY[pipeline]:
        with Omni(tiny_first_party(tiny), device="cpu", dtype="float32") as omni:
            assert omni.spec.name == pipeline, tiny.label  # the table names the right model
            request = warmup_request(omni.pipeline)  # validated: raises if refused
            assert request.request_id == "warmup"
            if omni.spec.modality in ("image", "video"):
                assert request.num_inference_steps, tiny.label


def test_qwen_warmup_takes_the_steps_its_scheduler_needs(
    tiny_first_party: Callable[[Any], str],
) -> None:
    """The tiny Qwen-Image scheduler has ``shift_terminal`` (so does the published one): two
    steps. One step, asked for with --warmup-request, is refused with that cause, on one line,
    without a hint about sizes."""
    from omni_core import Omni
    from omni_core.contract.requests import warmup_request
    from omni_core.runtime.engine import Engine
    from omni_core.serving.models import WarmupError, warm_up

    (tiny,) = TINY.TINY["qwen-image"]
    with Omni(tiny_first_party(tiny), device="cpu", dtype="float32") as omni:
        assert warmup_request(omni.pipeline).num_inference_steps == 2
        engine = Engine(omni.pipeline, name="qwen").start()
        try:
            with pytest.raises(WarmupError) as info:
                warm_up(omni.pipeline, engine, {"num_inference_steps": 1})
        finally:
            engine.stop()
    message = str(info.value)
    assert message == (
        "the warm-up request was refused: num_inference_steps=1: this checkpoint's scheduler "
        "(shift_terminal) needs at least 2 steps; set one with --warmup-request JSON or pass "
        "--no-warmup"
    )


def test_a_refused_warmup_size_gets_the_size_hint(tiny_first_party: Callable[[Any], str]) -> None:
    from omni_core import Omni
    from omni_core.runtime.engine import Engine
    from omni_core.serving.models import WarmupError, warm_up

    (tiny,) = TINY.TINY["qwen-image"]
    with Omni(tiny_first_party(tiny), device="cpu", dtype="float32") as omni:
        engine = Engine(omni.pipeline, name="qwen").start()
        try:
            with pytest.raises(WarmupError) as info:
                warm_up(omni.pipeline, engine, {"width": 33, "height": 64})
        finally:
            engine.stop()
    message = str(info.value)
    assert message.startswith("the warm-up request was refused: width=33: ")
    assert message.endswith(
        'choose a size it takes with --warmup-request \'{"width": W, "height": H}\' or pass '
        "--no-warmup"
    )
