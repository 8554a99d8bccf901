"""Stable Audio with the first-block and TaylorSeer step caches (its DiT blocks return one bare
stream, declared as the adapter's ``block_streams``). Threshold 0 is bit-equal to no cache; a
lossy threshold skips steps (counted by the calls the skipped block did not make) at a quality
cost measured as PSNR against the uncached clip; batched requests equal the same requests alone
with the cache on; the caches that need per-model calibration are refused with a clear error."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch

from omni_core import ConfigError, Omni
from omni_core.diffusion import psnr

#: Enough steps for the cache to have something to skip; CFG on.
KW: dict[str, Any] = {"duration_s": 0.2, "num_inference_steps": 8, "guidance_scale": 5.0}
PROMPT = "a dog barking in the rain"
#: The tiny random-weight DiT's block-0 residual changes by ~1.05-1.3x of itself per step (a
#: trained model's is expected to move far less), so only a threshold above 1 skips anything
#: here.
LOSSY = 1.1


class _BlockCalls:
    """Counts the computed calls of one DiT block (a skipped block never runs its attention)."""

    def __init__(self, block: Any) -> None:
        self.count = 0
        self.handle = block.attn1.register_forward_pre_hook(self._hook)

    def _hook(self, *args: Any) -> None:
        self.count += 1

    def close(self) -> None:
        self.handle.remove()


def _cached(checkpoint: Any, threshold: float) -> Omni:
    cache = {"backend": "first-block", "options": {"threshold": threshold}}
    return Omni(checkpoint, device="cpu", dtype="float32", cache=cache)


def _taylorseer(checkpoint: Any, interval: int) -> Omni:
    """TaylorSeer after 2 warmup steps (float32 factors: the tiny model runs in float32)."""
    options = {"cache_interval": interval, "warmup_steps": 2, "factors_dtype": "float32"}
    cache = {"backend": "taylorseer", "options": options}
    return Omni(checkpoint, device="cpu", dtype="float32", cache=cache)


def _generate(omni: Omni, **kwargs: Any) -> Any:
    with warnings.catch_warnings():  # torchsde's float-rounding notes on its interval ends
        warnings.simplefilter("ignore", UserWarning)
        return omni.generate(PROMPT, **{"seed": 5, **KW, **kwargs})


def _run(omni: Omni) -> tuple[Any, int]:
    calls = _BlockCalls(omni.pipeline.transformer.transformer_blocks[1])
    try:
        return _generate(omni), calls.count
    finally:
        calls.close()


def _psnr(reference: Any, test: Any) -> float:
    """Against the reference's own peak-to-peak range (the tiny model's clip is not full
    scale, so 2.0 would flatter any difference)."""
    return psnr(reference, test, data_range=float(np.ptp(reference)))


@pytest.fixture(scope="module")
def uncached(audio_model) -> Any:
    return _generate(audio_model)


def test_threshold_zero_is_bit_equal_to_no_cache(audio_checkpoint, uncached) -> None:
    ours, computed = _run(_cached(audio_checkpoint, 0.0))
    assert np.array_equal(ours.audio, uncached.audio)
    stats = ours.info["step_cache"]["transformer"]
    assert stats["backend"] == "first-block"
    assert (stats["calls"], stats["hits"]) == (KW["num_inference_steps"], 0)
    assert computed == KW["num_inference_steps"]  # one [uncond; cond] forward per step


def test_lossy_threshold_skips_steps_at_a_reported_cost(
    audio_checkpoint, audio_model, uncached
) -> None:
    ours, computed = _run(_cached(audio_checkpoint, LOSSY))
    stats = ours.info["step_cache"]["transformer"]
    calls = KW["num_inference_steps"]
    assert stats["calls"] == calls and 0 < stats["hits"] < calls
    assert computed == calls - stats["hits"]  # a hit is a call block 1 never made
    assert ours.info["acceleration"]["lossy"] is True
    db = _psnr(uncached.audio, ours.audio)
    worst = float(np.abs(ours.audio - uncached.audio).max())
    other = _psnr(uncached.audio, _generate(audio_model, seed=6).audio)
    print(  # the quality cost, in the test log (pytest -rP) and in models-stable-audio.md
        f"first-block threshold {LOSSY}: {stats['hits']}/{calls} steps reused; vs uncached: "
        f"PSNR {db:.1f} dB, worst sample {worst:.3f} of a {np.ptp(uncached.audio):.2f} range "
        f"(another seed: {other:.1f} dB)"
    )
    assert db < np.inf  # lossy indeed
    assert db > other + 6  # ... and still the same clip, far closer than another seed's


def test_batched_equals_alone_with_the_cache_on(audio_checkpoint) -> None:
    omni = _cached(audio_checkpoint, LOSSY)
    specs = [
        {"prompt": PROMPT, "seed": 5},
        {"prompt": "rain on a tin roof", "guidance_scale": 1.0, "seed": 2},
        {"prompt": "a bell", "seed": 3, "num_inference_steps": 6, "negative_prompt": "noise"},
    ]
    requests = [omni.request(**{**KW, **s}) for s in specs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        alone = [omni.run([r.model_copy()])[0] for r in requests]
        together = omni.run(requests)
    assert sum(r.info["step_cache"]["transformer"]["hits"] for r in alone) > 0
    for a, b in zip(alone, together, strict=True):
        assert np.array_equal(a.audio, b.audio)
        assert a.info["step_cache"] == b.info["step_cache"]


def test_a_skipped_forward_replays_the_computed_one(audio_checkpoint) -> None:
    """One real DiT call's inputs, twice in one cache context: the second is served from the
    cache (block 1 replayed) and returns the first's prediction."""
    omni = _cached(audio_checkpoint, 0.5)
    transformer = omni.pipeline.transformer
    seen: list[tuple[tuple, dict[str, Any]]] = []
    hook = transformer.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append((args, dict(kwargs))), with_kwargs=True
    )
    try:
        _generate(omni, num_inference_steps=1)
    finally:
        hook.remove()
    accel = omni.pipeline.accel
    args, kwargs = seen[0]
    with torch.no_grad():
        with accel.cache_context("transformer", "probe"):
            first = transformer(*args, **kwargs)[0]
        with accel.cache_context("transformer", "probe"):
            second = transformer(*args, **kwargs)[0]
    assert accel.finish(["probe"])["transformer"]["hits"] == 1
    torch.testing.assert_close(first, second, rtol=0, atol=1e-5)


def test_taylorseer_predicts_the_dit_between_computes(audio_checkpoint, uncached) -> None:
    steps = KW["num_inference_steps"]
    exact, computed = _run(_taylorseer(audio_checkpoint, 1))
    assert np.array_equal(exact.audio, uncached.audio)
    stats = exact.info["step_cache"]["transformer"]
    assert (stats["backend"], stats["calls"], stats["hits"]) == ("taylorseer", steps, 0)
    ours, computed = _run(_taylorseer(audio_checkpoint, 2))
    stats = ours.info["step_cache"]["transformer"]
    # Steps 0, 1 warm up; then 3, 5, 7 compute and 2, 4, 6 are predicted.
    assert (stats["calls"], stats["hits"]) == (steps, 3)
    assert computed == steps - stats["hits"]  # a predicted block never runs
    assert not np.array_equal(ours.audio, uncached.audio)


@pytest.mark.parametrize(
    ("backend", "words"),
    [
        ("teacache", "per-model calibration"),
        ("magcache", "per-model calibration"),
        ("dbcache", "not supported by this pipeline"),
    ],
)
def test_other_caches_are_refused_clearly(backend, words, audio_checkpoint) -> None:
    with pytest.raises(ConfigError, match=words):
        Omni(audio_checkpoint, device="cpu", dtype="float32", cache={"backend": backend})
