"""LTX-2 image to video against diffusers' LTX2ImageToVideoPipeline (the image H.264-
recompressed, VAE-encoded into the first latent frame and kept clean), spatio-temporal
guidance on a transformer that takes it (LTX-2.3's blocks) against LTX2Pipeline, and the
checks of the input image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omni_core import InvalidRequestError

SMALL: dict[str, Any] = {"height": 32, "width": 64, "num_frames": 5, "num_inference_steps": 2}
PROMPT = "a cat in the sun"


def _image(seed: int, size: tuple[int, int] = (64, 32)) -> Any:
    from PIL import Image

    pixels = np.random.RandomState(seed).rand(size[1], size[0], 3) * 255
    return Image.fromarray(pixels.astype("uint8"))


@pytest.fixture(scope="module")
def i2v_reference(ltx_i2v_checkpoint: Path) -> Any:
    import diffusers

    pipe = diffusers.LTX2ImageToVideoPipeline.from_pretrained(ltx_i2v_checkpoint)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.mark.parametrize(
    "extras",
    [{}, {"image_crf": 0, "audio_guidance_scale": 1.0, "modality_scale": 1.0}],
    ids=["defaults", "no-crf-video-cfg-only"],
)
def test_image_to_video_matches_diffusers(
    extras, ltx_i2v_model, i2v_reference, reference, worst_difference, worst_audio
) -> None:
    image = _image(0)
    ours = ltx_i2v_model.generate(PROMPT, images=[image], seed=0, extras=extras, **SMALL)
    frames, sound = reference(i2v_reference, 0, prompt=PROMPT, image=image, **SMALL, **extras)
    assert worst_difference(ours.video, frames) <= 1
    assert worst_audio(ours.audio, sound) <= 1e-4
    assert ours.video.shape == (5, 32, 64, 3)


def test_the_image_conditions_the_video(ltx_i2v_model) -> None:
    a, b = (
        ltx_i2v_model.generate(PROMPT, images=[_image(s)], seed=0, **SMALL).video for s in (0, 1)
    )
    assert np.abs(a.astype(int) - b.astype(int)).max() > 10


@pytest.mark.parametrize(
    ("images", "words"),
    [([], "exactly one input image"), ([_image(0), _image(1)], "exactly one input image")],
)
def test_image_count_is_checked(images, words, ltx_i2v_checkpoint) -> None:
    from omni_core import GenerationRequest
    from omni_ltx.pipeline import LTXPipeline

    request = GenerationRequest(prompt="x", images=images, width=32, height=32)
    with pytest.raises(InvalidRequestError, match=words) as info:
        LTXPipeline.precheck(ltx_i2v_checkpoint, request)
    assert info.value.param == "images"


def test_stg_on_perturbable_blocks_matches_diffusers(
    tmp_path_factory, reference, worst_difference, worst_audio, forwards
) -> None:
    """LTX-2.3's blocks take STG's perturbation: one more forward for the perturbed rows."""
    import diffusers

    from omni_core import Omni
    from omni_ltx.testing import build_tiny_ltx2

    path = build_tiny_ltx2(tmp_path_factory.mktemp("ltx-stg") / "tiny", perturbed_attn=True)
    omni = Omni(path, device="cpu", dtype="float32")
    extras = {
        "stg_blocks": [1],
        "stg_scale": 2.0,
        "modality_scale": 1.0,
        "audio_modality_scale": 1.0,
    }
    with forwards(omni.pipeline.transformer) as calls:
        ours = omni.generate(PROMPT, seed=4, extras=extras, **SMALL)
    assert calls.rows == [2, 1, 2, 1]  # the CFG pair, then the perturbed row
    pipe = diffusers.LTX2Pipeline.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    kwargs = {**SMALL, "stg_scale": 2.0, "modality_scale": 1.0, "audio_modality_scale": 1.0}
    frames, sound = reference(pipe, 4, prompt=PROMPT, spatio_temporal_guidance_blocks=[1], **kwargs)
    assert worst_difference(ours.video, frames) <= 1
    assert worst_audio(ours.audio, sound) <= 1e-4
    plain = omni.generate(
        PROMPT, seed=4, extras={**extras, "stg_scale": 0.0, "audio_stg_scale": 0.0}, **SMALL
    )
    assert np.abs(plain.video.astype(int) - ours.video.astype(int)).max() > 10
    # Batched with a request perturbing another block: one STG forward per set of blocks.
    other = {**extras, "stg_blocks": [0]}
    requests = [omni.request(PROMPT, seed=4, extras=e, **SMALL) for e in (extras, other)]
    alone = [omni.run([r.model_copy()])[0] for r in requests]
    with forwards(omni.pipeline.transformer) as calls:
        together = omni.run(requests)
    assert calls.rows == [4, 1, 1, 4, 1, 1]
    for a, b in zip(alone, together, strict=True):
        assert worst_difference(b.video, a.video.astype(float)) <= 1
    assert np.abs(alone[0].video.astype(int) - alone[1].video.astype(int)).max() > 10
