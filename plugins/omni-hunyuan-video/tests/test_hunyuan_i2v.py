"""HunyuanVideo-1.5 image to video against diffusers' HunyuanVideo15ImageToVideoPipeline: the
image cropped to its size bucket, VAE-encoded into the first latent frame, its SigLIP tokens in
the transformer's image stream; and the checks of the input image and the size."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omni_core import InvalidRequestError

STEPS: dict[str, Any] = {"num_frames": 5, "num_inference_steps": 2}


def _image(seed: int, size: tuple[int, int] = (60, 40)) -> Any:
    from PIL import Image

    pixels = np.random.RandomState(seed).rand(size[1], size[0], 3) * 255
    return Image.fromarray(pixels.astype("uint8"))


@pytest.mark.parametrize("kwargs", [{}, {"guidance_scale": 1.0}], ids=["guider", "no-cfg"])
def test_image_to_video_matches_diffusers(
    kwargs, hunyuan_i2v_checkpoint, hunyuan_i2v_model, worst_difference
) -> None:
    import diffusers
    import torch

    image = _image(0)
    ours = hunyuan_i2v_model.generate("a cat", images=[image], seed=0, **STEPS, **kwargs)
    pipe = diffusers.HunyuanVideo15ImageToVideoPipeline.from_pretrained(hunyuan_i2v_checkpoint)
    pipe.set_progress_bar_config(disable=True)
    pipe.guider = diffusers.ClassifierFreeGuidance(guidance_scale=kwargs.get("guidance_scale", 6))
    generator = torch.Generator("cpu").manual_seed(0)
    reference = pipe(prompt="a cat", image=image, generator=generator, **STEPS).frames[0] * 255
    assert worst_difference(ours.video, reference) <= 1
    assert ours.video.shape == (5, 48, 64, 3)  # the 60x40 image's bucket at target size 64


def test_the_image_changes_the_video(hunyuan_i2v_model) -> None:
    a, b = (
        hunyuan_i2v_model.generate("a cat", images=[_image(s)], seed=0, **STEPS).video
        for s in (0, 1)
    )
    assert np.abs(a.astype(int) - b.astype(int)).max() > 10


def test_warmup_request_takes_an_image_and_its_bucket(hunyuan_i2v_model) -> None:
    from omni_core import GenerationRequest

    pipeline = hunyuan_i2v_model.pipeline
    checked = pipeline.validate(GenerationRequest(**pipeline.warmup_fields()))
    assert len(checked.images) == 1 and checked.num_frames == 1
    assert (checked.height, checked.width) == (64, 64)  # the square bucket at target size 64


@pytest.mark.parametrize(
    ("kwargs", "param", "words"),
    [
        ({}, "images", "exactly one input image"),
        ({"images": [_image(0)], "width": 60, "height": 40}, "size", "64x48"),
        ({"images": [_image(0)], "num_frames": 8}, "num_frames", "4k\\+1"),
    ],
    ids=["no-image", "size", "frames"],
)
def test_bad_requests_are_refused_before_any_compute(
    kwargs, param, words, hunyuan_i2v_checkpoint
) -> None:
    from omni_core import GenerationRequest
    from omni_hunyuan_video.pipeline import HunyuanVideoPipeline

    with pytest.raises(InvalidRequestError, match=words) as info:
        HunyuanVideoPipeline.precheck(
            hunyuan_i2v_checkpoint, GenerationRequest(prompt="x", **kwargs)
        )
    assert info.value.param == param
