"""Every Wan variant reproduces diffusers' own pipeline on the same checkpoint, seed and settings.

Outputs are compared as uint8 frames: every pixel must be within 1/255 of diffusers'.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

SEED = 1234


def reference(
    path: Any, kwargs: dict[str, Any], *, image: Any = None, scheduler_overrides: Any = None
) -> np.ndarray:
    """diffusers' WanPipeline / WanImageToVideoPipeline output as uint8 [F, H, W, 3]."""
    from diffusers import WanImageToVideoPipeline, WanPipeline

    image_pipe = path.name.startswith("i2v") or image is not None
    cls = WanImageToVideoPipeline if image_pipe else WanPipeline
    pipe = cls.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    if scheduler_overrides:
        pipe.scheduler = type(pipe.scheduler).from_config(
            pipe.scheduler.config, **scheduler_overrides
        )
    kwargs = dict(kwargs)
    if image is not None:
        kwargs["image"] = image
    frames = pipe(
        **kwargs, output_type="np", generator=torch.Generator("cpu").manual_seed(SEED)
    ).frames[0]
    return (frames * 255).round().astype(np.uint8)


def assert_close(ours: np.ndarray, ref: np.ndarray) -> None:
    assert ours.dtype == np.uint8 and ours.shape == ref.shape
    diff = np.abs(ours.astype(np.int16) - ref.astype(np.int16))
    assert diff.max() <= 1, f"max pixel difference {diff.max()} (> 1/255)"
    # Not a trivially constant video: the comparison means something.
    assert ref.std() > 1.0


CASES = [
    pytest.param("t2v", {}, False, id="wan2.1-t2v"),
    pytest.param("t2v", {"guidance_scale": 1.0}, False, id="wan2.1-t2v-no-cfg"),
    pytest.param("t2v-a14b", {"guidance_scale_2": 2.5}, False, id="wan2.2-t2v-a14b"),
    pytest.param("ti2v", {}, False, id="wan2.2-ti2v-text"),
    pytest.param("ti2v", {}, True, id="wan2.2-ti2v-image"),
    pytest.param("i2v", {}, True, id="wan2.1-i2v-clip"),
    pytest.param("i2v-a14b", {"guidance_scale_2": 3.0}, True, id="wan2.2-i2v-a14b"),
]


@pytest.mark.parametrize(("variant", "overrides", "with_image"), CASES)
def test_wan_matches_diffusers(
    variant: str,
    overrides: dict,
    with_image: bool,
    tiny_wan: Any,
    omni_wan_model: Any,
    cond_image: Any,
    wan_kwargs: Any,
) -> None:
    path = tiny_wan(variant)
    image = cond_image if with_image else None
    kwargs = wan_kwargs(variant, **overrides)
    ref = reference(path, kwargs, image=image)
    model = omni_wan_model(variant)
    if image is not None:
        kwargs["images"] = [image]
    result = model.generate(seed=SEED, **kwargs)
    assert_close(result.video, ref)
    assert result.info["seed"] == SEED
    assert {"prepare_s", "denoise_s", "decode_s", "total_s"} <= set(result.timings)
    # Attention ran through omni's dispatcher, both roles.
    assert result.info["attention"]["routed"]["self"] == 2
    assert result.info["attention"]["routed"]["cross"] == 2


def test_wan_a14b_switches_experts(omni_wan_model: Any, wan_kwargs: Any) -> None:
    """The A14B test above is meaningful only if both experts run within its 4 steps."""
    model = omni_wan_model("t2v-a14b")
    request = model.request(**wan_kwargs("t2v-a14b"), seed=1)
    experts = model.pipeline.prepare(request).data["experts"]
    assert 0 in experts and 1 in experts
    # boundary_ratio as an extra moves the switch.
    late = model.request(**wan_kwargs("t2v-a14b"), seed=1, boundary_ratio=0.1)
    assert set(model.pipeline.prepare(late).data["experts"]) == {0}


def test_wan_flow_shift_extra_matches_diffusers(
    tiny_wan: Any, omni_wan_model: Any, wan_kwargs: Any
) -> None:
    kwargs = wan_kwargs("t2v")
    ref = reference(tiny_wan("t2v"), kwargs, scheduler_overrides={"flow_shift": 7.0})
    result = omni_wan_model("t2v").generate(seed=SEED, flow_shift=7.0, **kwargs)
    assert_close(result.video, ref)


def test_generic_adapter_runs_wan_like_diffusers(tiny_wan: Any, wan_kwargs: Any) -> None:
    """pipeline="diffusers" runs diffusers' own WanPipeline, with attention routed."""
    from omni_core import Omni

    path = tiny_wan("t2v")
    model = Omni(path, pipeline="diffusers", device="cpu", dtype="float32")
    result = model.generate(seed=SEED, **wan_kwargs("t2v"))
    assert_close(result.video, reference(path, wan_kwargs("t2v")))
    assert result.info["attention"]["routed"]["transformer"] == {"self": 2, "cross": 2, "joint": 0}


def test_wan_bfloat16_close_to_diffusers(tiny_wan: Any, wan_kwargs: Any) -> None:
    """bf16 (the GPU default): diffusers runs CFG as two forwards, omni as one batch, so the
    two differ by bf16 rounding only; the VAE stays float32 on both sides."""
    from diffusers import AutoencoderKLWan, WanPipeline

    from omni_core import Omni
    from omni_core.diffusion import dtype_kwargs

    path = tiny_wan("t2v")
    vae = AutoencoderKLWan.from_pretrained(path / "vae", **dtype_kwargs(torch.float32))
    pipe = WanPipeline.from_pretrained(path, vae=vae, **dtype_kwargs(torch.bfloat16))
    pipe.set_progress_bar_config(disable=True)
    kwargs = wan_kwargs("t2v")
    frames = pipe(
        **kwargs, output_type="np", generator=torch.Generator("cpu").manual_seed(SEED)
    ).frames[0]
    ref = (frames * 255).round().astype(np.int16)
    result = Omni(path, dtype="bfloat16").generate(seed=SEED, **kwargs)
    diff = np.abs(result.video.astype(np.int16) - ref)
    assert diff.max() <= 4 and diff.mean() < 0.5, (diff.max(), diff.mean())


def test_wan_single_frame_is_also_an_image(
    tiny_wan: Any, omni_wan_model: Any, wan_kwargs: Any
) -> None:
    kwargs = wan_kwargs("t2v", num_frames=1)
    ref = reference(tiny_wan("t2v"), kwargs)
    result = omni_wan_model("t2v").generate(seed=SEED, **kwargs)
    assert_close(result.video, ref)
    assert len(result.images) == 1
    assert np.array_equal(np.asarray(result.images[0]), result.video[0])


def test_wan_unbatched_cfg_matches_diffusers(tiny_wan: Any, wan_kwargs: Any) -> None:
    """cfg_batch=False runs the two CFG branches as two forwards (less memory), same output."""
    from omni_core import Omni

    path = tiny_wan("t2v-a14b")
    kwargs = wan_kwargs("t2v-a14b", guidance_scale_2=2.5)
    model = Omni(path, device="cpu", dtype="float32", cfg_batch=False)
    result = model.generate(seed=SEED, **kwargs)
    assert result.info["cfg_batch"] is False
    assert_close(result.video, reference(path, kwargs))


def _diffusers_hooks_support_cache() -> bool:
    from diffusers.hooks import HookRegistry

    return hasattr(HookRegistry, "invalidate_child_registries_cache")


@pytest.mark.skipif(
    not _diffusers_hooks_support_cache(),
    reason="omni_core.diffusion.acceleration's step cache uses diffusers hook APIs this "
    "diffusers lacks",
)
def test_wan_step_cache_reports_hits(tiny_wan: Any, wan_kwargs: Any) -> None:
    """omni_core.diffusion.acceleration's step cache wraps every expert's forward; hits are
    reported."""
    from omni_core import Omni

    model = Omni(tiny_wan("t2v-a14b"), device="cpu", dtype="float32", cache="first-block")
    result = model.generate(seed=SEED, **wan_kwargs("t2v-a14b", num_inference_steps=8))
    assert "cache:first-block" in result.info["acceleration"]["order"]
    stats = result.info["step_cache"]
    assert set(stats) == {"transformer", "transformer_2"}
    assert sum(s["calls"] for s in stats.values()) == 8
    assert result.video.shape == (9, 16, 32, 3)
