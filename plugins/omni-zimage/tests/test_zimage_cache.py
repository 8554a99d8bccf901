"""Z-Image with the first-block and TaylorSeer step caches over its joint ``layers`` (the refiners,
on other token sets, always run). Threshold 0 is bit-equal to no cache; a lossy threshold skips
steps (counted by the calls the skipped layer did not make) at a quality cost measured as PSNR
against the uncached image; batched requests equal the same requests alone with the cache on;
the caches that need per-model calibration are refused with a clear error."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omni_core import ConfigError, Omni
from omni_core.diffusion import psnr

#: Enough steps for the cache to have something to skip; CFG on.
KW: dict[str, Any] = {
    "height": 64,
    "width": 64,
    "num_inference_steps": 8,
    "guidance_scale": 3.0,
    "negative_prompt": "blurry",
    "max_sequence_length": 64,
}
PROMPT = "a red cat on a mat"
#: The tiny random-weight model's layer-0 residual moves by more than itself from step to step
#: (a trained model's is expected to move far less), so only a threshold above 1 skips here.
LOSSY = 1.3


class _LayerCalls:
    """Counts the computed calls of one module (a skipped layer never runs its attention)."""

    def __init__(self, module: Any) -> None:
        self.count = 0
        self.handle = module.register_forward_pre_hook(self._hook)

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


def _run(omni: Omni, **kwargs: Any) -> tuple[Any, int, int]:
    transformer = omni.pipeline.transformer
    layer = _LayerCalls(transformer.layers[1].attention)
    refiner = _LayerCalls(transformer.noise_refiner[0].attention)
    try:
        result = omni.generate(PROMPT, **{"seed": 5, **KW, **kwargs})
    finally:
        layer.close()
        refiner.close()
    return result, layer.count, refiner.count


def _array(result: Any) -> np.ndarray:
    return np.asarray(result.images[0])


@pytest.fixture(scope="module")
def uncached(zimage_model) -> Any:
    return zimage_model.generate(PROMPT, seed=5, **KW)


def test_threshold_zero_is_bit_equal_to_no_cache(zimage_checkpoint, uncached) -> None:
    ours, computed, refined = _run(_cached(zimage_checkpoint, 0.0))
    assert np.array_equal(_array(ours), _array(uncached))
    stats = ours.info["step_cache"]["transformer"]
    assert stats["backend"] == "first-block"
    steps = KW["num_inference_steps"]
    assert (stats["calls"], stats["hits"]) == (steps, 0)
    assert computed == refined == steps  # one [cond; uncond] forward per step


def test_lossy_threshold_skips_the_joint_layers_at_a_reported_cost(
    zimage_checkpoint, zimage_model, uncached
) -> None:
    ours, computed, refined = _run(_cached(zimage_checkpoint, LOSSY))
    stats = ours.info["step_cache"]["transformer"]
    steps = KW["num_inference_steps"]
    assert stats["calls"] == steps and 0 < stats["hits"] < steps
    assert computed == steps - stats["hits"]  # a hit is a call layer 1 never made
    assert refined == steps  # the refiners are outside the cache: they always run
    assert ours.info["acceleration"]["lossy"] is True
    want = _array(uncached)
    db = psnr(want, _array(ours), data_range=255.0)
    other = psnr(want, _array(zimage_model.generate(PROMPT, seed=6, **KW)), 255.0)
    flat = psnr(want, np.full_like(want, want.mean()), data_range=255.0)
    print(  # the quality cost, in the test log (pytest -rP) and in models-zimage.md
        f"first-block threshold {LOSSY}: {stats['hits']}/{steps} steps reused; vs uncached: "
        f"PSNR {db:.1f} dB (another seed: {other:.1f} dB, a flat image: {flat:.1f} dB)"
    )
    assert db < np.inf  # lossy indeed
    assert db > flat + 3  # far closer to the uncached image than its flat mean is


def test_batched_equals_alone_with_the_cache_on(zimage_checkpoint) -> None:
    omni = _cached(zimage_checkpoint, LOSSY)
    specs = [
        {"prompt": PROMPT, "seed": 5},
        {"prompt": "a lighthouse at dusk", "guidance_scale": 0.0, "seed": 2},
        {"prompt": "a red cat", "seed": 3, "num_inference_steps": 6, "negative_prompt": "text"},
    ]
    requests = [omni.request(**{**KW, **s}) for s in specs]
    alone = [omni.run([r.model_copy()])[0] for r in requests]
    together = omni.run(requests)
    assert sum(r.info["step_cache"]["transformer"]["hits"] for r in alone) > 0
    for a, b in zip(alone, together, strict=True):
        assert np.array_equal(_array(a), _array(b))
        assert a.info["step_cache"] == b.info["step_cache"]


def test_taylorseer_predicts_the_joint_layers_between_computes(zimage_checkpoint, uncached) -> None:
    steps = KW["num_inference_steps"]
    exact, computed, refined = _run(_taylorseer(zimage_checkpoint, 1))
    assert np.array_equal(_array(exact), _array(uncached))
    stats = exact.info["step_cache"]["transformer"]
    assert (stats["backend"], stats["calls"], stats["hits"]) == ("taylorseer", steps, 0)
    ours, computed, refined = _run(_taylorseer(zimage_checkpoint, 2))
    stats = ours.info["step_cache"]["transformer"]
    # Steps 0, 1 warm up; then 3, 5, 7 compute and 2, 4, 6 are predicted.
    assert (stats["calls"], stats["hits"]) == (steps, 3)
    assert computed == steps - stats["hits"]  # a predicted layer never runs
    assert refined == steps  # the refiners are outside the cache: they always run
    assert not np.array_equal(_array(ours), _array(uncached))


@pytest.mark.parametrize(
    ("backend", "words"),
    [
        ("teacache", "per-model calibration"),
        ("magcache", "per-model calibration"),
        ("dbcache", "not supported by this pipeline"),
    ],
)
def test_other_caches_are_refused_clearly(backend, words, zimage_checkpoint) -> None:
    with pytest.raises(ConfigError, match=words):
        Omni(zimage_checkpoint, device="cpu", dtype="float32", cache={"backend": backend})
