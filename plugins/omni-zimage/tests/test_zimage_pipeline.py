"""Z-Image text-to-image against diffusers' ZImagePipeline (with and without CFG, its
normalisation and truncation), step batching, the prompt cache and the request checks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omni_core import InvalidRequestError

#: Small but real settings: 64x64 (16 image tokens), 3 steps, 64 text tokens.
SMALL: dict[str, Any] = {"height": 64, "width": 64, "num_inference_steps": 3}
TEXT = {"max_sequence_length": 64}


class Forwards:
    """Counts the transformer's forward calls and the rows (list items) of each."""

    def __init__(self, module: Any) -> None:
        self.rows: list[int] = []
        self.handle = module.register_forward_pre_hook(self._hook)

    def _hook(self, module: Any, args: Any) -> None:
        self.rows.append(len(args[0]))

    def __enter__(self) -> Forwards:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.handle.remove()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"guidance_scale": 0.0},  # Turbo: no CFG
        {"guidance_scale": 4.0, "negative_prompt": "blurry", "num_images_per_prompt": 2},
        {"guidance_scale": 6.0, "cfg_normalization": 1.1, "cfg_truncation": 0.5},
        {"guidance_scale": 0.0, "height": 48, "width": 80},
    ],
    ids=["turbo", "cfg-negative-2", "cfg-norm-trunc", "48x80"],
)
def test_text_to_image_matches_diffusers(
    kwargs, zimage_model, zimage_reference, reference_images, worst_difference
) -> None:
    args = {**SMALL, **TEXT, **kwargs}
    outputs = args.pop("num_images_per_prompt", 1)
    ours = zimage_model.generate("a red cat", seed=3, num_outputs=outputs, **args)
    reference = reference_images(
        zimage_reference, 3, prompt="a red cat", num_images_per_prompt=outputs, **args
    )
    assert worst_difference(ours.images, reference) <= 1
    assert ours.info["cfg"] is (args["guidance_scale"] > 0)
    assert ours.images[0].size == (args["width"], args["height"])


def test_bf16_images_equal_diffusers_bf16(zimage_checkpoint, worst_difference) -> None:
    """In bfloat16 too: the same casts in the same places (float32 noise, latents and CFG mix;
    the transformer's input cast to its dtype), so the images are the reference's."""
    import diffusers
    import torch

    from omni_core import Omni

    args = {**SMALL, **TEXT, "guidance_scale": 4.0, "negative_prompt": "blurry"}
    ours = Omni(zimage_checkpoint, device="cpu", dtype="bfloat16").generate("a cat", seed=5, **args)
    pipe = diffusers.ZImagePipeline.from_pretrained(zimage_checkpoint, dtype=torch.bfloat16)
    pipe.set_progress_bar_config(disable=True)
    generator = torch.Generator("cpu").manual_seed(5)
    reference = pipe(prompt="a cat", generator=generator, **args).images
    assert worst_difference(ours.images, reference) <= 1


def test_cfg_changes_the_image(zimage_model) -> None:
    """The fidelity cases prove something only if CFG's branch matters on the tiny model."""
    plain = zimage_model.generate("a red cat", seed=3, guidance_scale=0.0, **SMALL, **TEXT)
    guided = zimage_model.generate("a red cat", seed=3, guidance_scale=4.0, **SMALL, **TEXT)
    a, b = (np.asarray(r.images[0]).astype(int) for r in (plain, guided))
    assert np.abs(a - b).max() > 10


def test_batched_equals_alone_in_one_forward_per_step(zimage_model, worst_difference) -> None:
    omni = zimage_model
    specs = [
        {"prompt": "a red cat", "seed": 1},
        {"prompt": "a lighthouse at dusk", "guidance_scale": 3.0, "seed": 2, "num_outputs": 2},
        {"prompt": "a dog", "seed": 3, "num_inference_steps": 4, "negative_prompt": "text"},
    ]
    specs[2]["guidance_scale"] = 5.0
    requests = [omni.request(**{**SMALL, **TEXT, **s}) for s in specs]
    alone = [omni.run([r.model_copy()])[0] for r in requests]
    with Forwards(omni.pipeline.transformer) as calls:
        together = omni.run(requests)
    # Steps 1-3: 1 + 2x2 + 1x2 rows in one forward; the 4-step request finishes alone (CFG: 2).
    assert calls.rows == [7, 7, 7, 2]
    for a, b in zip(alone, together, strict=True):
        assert worst_difference(b.images, a.images) <= 1


def test_prompt_cache_encodes_a_shared_negative_prompt_once(zimage_model) -> None:
    omni = zimage_model
    kwargs = {**SMALL, **TEXT, "guidance_scale": 2.0, "negative_prompt": "watermark"}
    omni.generate("a cat", seed=0, **kwargs)
    again = omni.generate("a frog", seed=0, **kwargs)
    assert again.timings["prompt_cache_hits"] == 1.0


def test_defaults_are_the_turbos(zimage_model) -> None:
    checked = zimage_model.pipeline.validate(zimage_model.request("a cat"))
    assert (checked.height, checked.width) == (1024, 1024)
    assert checked.num_inference_steps == 9 and checked.guidance_scale == 0.0


@pytest.mark.parametrize(
    ("kwargs", "param", "words"),
    [
        ({"height": 72}, "size", "multiples of 16"),
        ({"images": [b"not read"]}, "images", "takes no input image"),
        ({"extras": {"cfg_truncation": 2.0}}, "cfg_truncation", "less than or equal to 1"),
        ({"extras": {"true_cfg_scale": 2.0}}, "true_cfg_scale", "Extra inputs"),
        ({"num_frames": 9}, "num_frames", "makes images"),
    ],
)
def test_bad_requests_are_refused_before_any_compute(
    kwargs, param, words, zimage_checkpoint
) -> None:
    from omni_core import GenerationRequest
    from omni_zimage.pipeline import ZImagePipeline

    request = GenerationRequest(prompt="x", **{"width": 64, "height": 64, **kwargs})
    with pytest.raises(InvalidRequestError, match=words) as info:
        ZImagePipeline.precheck(zimage_checkpoint, request)
    assert info.value.param == param


def test_registered_and_imports_only_faces(zimage_model) -> None:
    from pathlib import Path

    import omni_zimage
    from omni_core.testing import assert_imports_only_faces, assert_plugin_discoverable

    registry = assert_plugin_discoverable("omni-zimage")
    assert registry.pipelines["z-image"].architectures == ("ZImagePipeline",)
    assert registry.denoiser_for("ZImageTransformer2DModel") is not None
    assert zimage_model.spec.name == "z-image"
    package = Path(omni_zimage.__file__).parent
    runtime = [p for p in package.glob("*.py") if p.stem != "testing"]
    assert_imports_only_faces(runtime, test_kit=False)
    assert_imports_only_faces([package / "testing.py", *Path(__file__).parent.glob("*.py")])
