"""LTX-2 with a step cache: its blocks return the video and the audio stream, and both are
replayed. Threshold 0 is bit-equal to no cache; a lossy threshold skips steps (counted by the
calls the skipped blocks did not make) at a quality cost reported as PSNR against the uncached
run; the caches that cannot replay both streams are refused with a clear error."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from omni_core import ConfigError, Omni
from omni_core.diffusion import psnr

#: Enough steps for the tiny model's residuals to settle, so a cache has something to skip.
KW: dict[str, Any] = {"height": 32, "width": 32, "num_frames": 5, "num_inference_steps": 8}
PROMPT = "a red cat walks on the grass"
#: Each step of diffusers' default guidance is two forwards: [cond; uncond] and isolated.
FORWARDS_PER_STEP = 2


class _BlockCalls:
    """Counts the computed calls of one transformer block (a skipped block never runs its
    attention)."""

    def __init__(self, block: Any) -> None:
        self.count = 0
        self.handle = block.attn1.register_forward_pre_hook(self._hook)

    def _hook(self, *args: Any) -> None:
        self.count += 1

    def close(self) -> None:
        self.handle.remove()


@pytest.fixture(scope="module")
def uncached(ltx_model) -> Any:
    return ltx_model.generate(PROMPT, seed=5, **KW)


@pytest.fixture(scope="module")
def unrelated(ltx_model, uncached) -> tuple[float, float]:
    """PSNR (video, audio) of another seed against the uncached run: what "no resemblance"
    scores on the tiny random-weight model, the floor a cached run must clear."""
    other = ltx_model.generate(PROMPT, seed=6, **KW)
    return _psnr(uncached, other)


def _psnr(reference: Any, test: Any) -> tuple[float, float]:
    """Video against 0-255; audio against the reference's own peak-to-peak range (the tiny
    vocoder's clip is quiet, so full scale would flatter any difference)."""
    return (
        psnr(reference.video, test.video, data_range=255.0),
        psnr(reference.audio, test.audio, data_range=float(np.ptp(reference.audio))),
    )


def _run(ltx_checkpoint, backend: str, threshold: float) -> tuple[Any, int]:
    omni = Omni(
        ltx_checkpoint,
        device="cpu",
        dtype="float32",
        cache={"backend": backend, "options": {"threshold": threshold}},
    )
    calls = _BlockCalls(omni.pipeline.transformer.transformer_blocks[1])
    try:
        result = omni.generate(PROMPT, seed=5, **KW)
    finally:
        calls.close()
    return result, calls.count


@pytest.mark.parametrize("backend", ["first-block", "teacache"])
def test_threshold_zero_is_bit_equal_to_no_cache(backend, ltx_checkpoint, uncached) -> None:
    ours, computed = _run(ltx_checkpoint, backend, 0.0)
    assert np.array_equal(ours.video, uncached.video)
    assert np.array_equal(ours.audio, uncached.audio)
    stats = ours.info["step_cache"]["transformer"]
    assert stats["backend"] == backend
    calls = KW["num_inference_steps"] * FORWARDS_PER_STEP
    assert (stats["calls"], stats["hits"]) == (calls, 0)
    assert computed == calls


#: The tiny random-weight model's block-0 residual and timestep modulation change a lot from
#: step to step, so skipping needs high thresholds there (a real checkpoint needs far lower).
LOSSY = [("first-block", 1.2), ("teacache", 0.8)]


@pytest.mark.parametrize(("backend", "threshold"), LOSSY)
def test_lossy_cache_skips_steps_at_a_reported_cost(
    backend, threshold, ltx_checkpoint, uncached, unrelated
) -> None:
    ours, computed = _run(ltx_checkpoint, backend, threshold)
    stats = ours.info["step_cache"]["transformer"]
    calls = KW["num_inference_steps"] * FORWARDS_PER_STEP
    assert stats["calls"] == calls and 0 < stats["hits"] < calls
    assert computed == calls - stats["hits"]  # a hit is a call block 1 never made
    assert ours.info["acceleration"]["lossy"] is True
    video_db, audio_db = _psnr(uncached, ours)
    print(  # the quality cost, in the test log (pytest -rP)
        f"{backend} threshold {threshold}: {stats['hits']}/{calls} calls reused; PSNR vs "
        f"uncached: video {video_db:.1f} dB, audio {audio_db:.1f} dB (another seed: "
        f"{unrelated[0]:.1f} / {unrelated[1]:.1f} dB)"
    )
    assert video_db < np.inf and audio_db < np.inf  # lossy indeed, on both streams
    # ... and still the same clip: the video far closer to the uncached run than another seed
    # is; the tiny model's sound hardly depends on the seed, so its bar is an RMS error
    # below 10% of the clip's range
    assert video_db > unrelated[0] + 6 and audio_db > 20


@pytest.mark.parametrize("backend", ["first-block", "teacache"])
def test_a_skipped_forward_replays_video_and_audio(backend, ltx_checkpoint) -> None:
    """One real transformer call's inputs, twice in one cache context: the second is served
    from the cache and returns the first's video and audio predictions."""
    omni = Omni(
        ltx_checkpoint,
        device="cpu",
        dtype="float32",
        cache={"backend": backend, "options": {"threshold": 0.5}},
    )
    transformer = omni.pipeline.transformer
    seen: list[dict[str, Any]] = []
    hook = transformer.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(dict(kwargs)), with_kwargs=True
    )
    try:
        omni.generate(PROMPT, seed=5, **{**KW, "num_inference_steps": 2})
    finally:
        hook.remove()
    accel = omni.pipeline.accel
    with torch.no_grad():
        with accel.cache_context("transformer", "probe"):
            first = transformer(**seen[0])
        with accel.cache_context("transformer", "probe"):
            second = transformer(**seen[0])
    assert accel.finish(["probe"])["transformer"]["hits"] == 1
    assert len(first) == 2  # video and audio
    for a, b in zip(first, second, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", ["magcache", "taylorseer"])
def test_other_caches_are_refused_clearly(backend, ltx_checkpoint) -> None:
    with pytest.raises(ConfigError, match="not supported by this pipeline"):
        Omni(ltx_checkpoint, device="cpu", dtype="float32", cache={"backend": backend})
