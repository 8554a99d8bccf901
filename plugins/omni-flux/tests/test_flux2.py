"""FLUX.2-dev and FLUX.2-klein text-to-image against diffusers' Flux2Pipeline and
Flux2KleinPipeline: the images, bf16 latents, batching and the request checks."""

from __future__ import annotations

import json
import shutil
from typing import Any

import numpy as np
import pytest

from omni_core import ConfigError, GenerationRequest, InvalidRequestError, Omni

SMALL = {"height": 64, "width": 64, "num_inference_steps": 2, "max_sequence_length": 64}


def _rows(module: Any) -> tuple[list[int], Any]:
    rows: list[int] = []
    handle = module.register_forward_pre_hook(
        lambda m, a, k: rows.append(k["hidden_states"].shape[0]), with_kwargs=True
    )
    return rows, handle


@pytest.mark.parametrize(
    ("variant", "kwargs"),
    [
        ("flux2", {}),  # embedded guidance 4.0 (diffusers' default)
        ("flux2", {"guidance_scale": 2.5, "height": 48, "width": 80}),
        ("flux2-klein", {}),  # real CFG at 4.0 against the empty prompt
        ("flux2-klein", {"guidance_scale": 1.0}),  # no CFG
    ],
    ids=["dev", "dev-48x80", "klein-cfg", "klein-no-cfg"],
)
def test_text_to_image_matches_diffusers(
    variant, kwargs, flux_models, flux_references, run_reference, assert_same
) -> None:
    args = {**SMALL, **kwargs}
    ours = flux_models[variant].generate("a red cat", seed=3, **args)
    reference = run_reference(flux_references[variant], 3, prompt="a red cat", **args)
    assert_same(ours.images, reference)
    assert ours.info["cfg"] is (variant == "flux2-klein" and "guidance_scale" not in kwargs)


def test_klein_negative_prompt_is_diffusers_negative_embeddings(
    flux_models, flux_references, run_reference, assert_same
) -> None:
    """diffusers' klein takes only negative embeddings (its negative prompt is ""): the same
    embeddings of "blurry" give the same image as omni's negative_prompt."""
    reference = flux_references["flux2-klein"]
    negative, _ = reference.encode_prompt(
        prompt="blurry", device="cpu", max_sequence_length=SMALL["max_sequence_length"]
    )
    ours = flux_models["flux2-klein"].generate(
        "a red cat", negative_prompt="blurry", guidance_scale=3.0, seed=4, num_outputs=2, **SMALL
    )
    expected = run_reference(
        reference,
        4,
        prompt="a red cat",
        negative_prompt_embeds=negative,
        guidance_scale=3.0,
        num_images_per_prompt=2,
        **SMALL,
    )
    assert_same(ours.images, expected)


def test_klein_bf16_latents_are_bit_equal_to_diffusers(flux_checkpoints) -> None:
    import diffusers
    import torch

    path = flux_checkpoints["flux2-klein"]
    reference = diffusers.Flux2KleinPipeline.from_pretrained(path, dtype=torch.bfloat16)
    reference.set_progress_bar_config(disable=True)
    kwargs = {"height": 64, "width": 96, "num_inference_steps": 3, "max_sequence_length": 32}
    # klein returns its latents un-normalised and un-patchified: what omni hands the VAE
    expected = reference(
        prompt="a red cat",
        guidance_scale=3.3,
        output_type="latent",
        generator=torch.Generator("cpu").manual_seed(0),
        **kwargs,
    ).images
    omni = Omni(path, device="cpu", dtype="bfloat16")
    state = omni.pipeline.prepare(omni.request("a red cat", guidance_scale=3.3, seed=0, **kwargs))
    while not state.done:
        omni.pipeline.step([state])
    ours = omni.pipeline._to_vae(state)
    assert ours.dtype == torch.bfloat16 and torch.equal(ours, expected)


@pytest.mark.parametrize(("variant", "per_step"), [("flux2", [2, 2]), ("flux2-klein", [4, 4])])
def test_batched_equals_alone(variant, per_step, flux_models) -> None:
    omni = flux_models[variant]
    requests = [
        omni.request("a red cat", guidance_scale=4.0, seed=1, **SMALL),
        omni.request("a lighthouse at dusk", guidance_scale=2.0, seed=2, **SMALL),
    ]
    alone = [omni.run([r])[0] for r in requests]
    rows, handle = _rows(omni.pipeline.transformer)
    try:
        together = omni.run(requests)
    finally:
        handle.remove()
    assert rows == per_step  # klein: [cond x2; uncond x2] in one forward per step
    for a, b in zip(alone, together, strict=True):
        diff = np.abs(np.asarray(a.images[0], int) - np.asarray(b.images[0], int)).max()
        assert diff <= 1


@pytest.fixture(scope="module")
def distilled(flux_checkpoints, tmp_path_factory) -> Any:
    """The klein checkpoint marked step-distilled (model_index.json's is_distilled)."""
    path = tmp_path_factory.mktemp("klein-distilled") / "model"
    shutil.copytree(flux_checkpoints["flux2-klein"], path)
    index = json.loads((path / "model_index.json").read_text())
    (path / "model_index.json").write_text(json.dumps({**index, "is_distilled": True}))
    return path


def test_distilled_klein_runs_without_cfg_in_4_steps(
    distilled, flux_references, run_reference, assert_same
) -> None:
    omni = Omni(distilled, device="cpu", dtype="float32")
    request = omni.pipeline.validate(GenerationRequest(prompt="x"))
    assert request.num_inference_steps == 4 and request.guidance_scale is None
    ours = omni.generate("a red cat", seed=5, height=64, width=64, max_sequence_length=64)
    assert ours.info["cfg"] is False
    import diffusers

    reference = diffusers.Flux2KleinPipeline.from_pretrained(distilled)
    reference.set_progress_bar_config(disable=True)
    expected = run_reference(
        reference,
        5,
        prompt="a red cat",
        height=64,
        width=64,
        num_inference_steps=4,
        max_sequence_length=64,
    )
    assert_same(ours.images, expected)
    with pytest.raises(InvalidRequestError, match="step-distilled"):
        omni.pipeline.validate(GenerationRequest(prompt="x", guidance_scale=4.0))


BAD = [
    ("flux2", {"negative_prompt": "blurry"}, "no classifier-free guidance", "negative_prompt"),
    ("flux2-klein", {"negative_prompt": "x", "guidance_scale": 1.0}, "> 1", "negative_prompt"),
    ("flux2", {"height": 72}, "multiples of 16", "size"),
    ("flux2-klein", {"images": [b"png"]}, "reference images", "images"),
    ("flux2", {"extras": {"max_sequence_length": 4096}}, "max_sequence_length", None),
    ("flux2", {"extras": {"true_cfg_scale": 2.0}}, "extras.true_cfg_scale", None),
]


@pytest.mark.parametrize(("variant", "kwargs", "match", "param"), BAD)
def test_bad_requests_are_refused(variant, kwargs, match, param, flux_models, flux_checkpoints):
    pipe = flux_models[variant].pipeline
    request = GenerationRequest(prompt="x", **kwargs)
    with pytest.raises(InvalidRequestError, match=match) as info:
        pipe.validate(request)
    if param is not None:
        assert info.value.param == param
    with pytest.raises(InvalidRequestError, match=match):
        type(pipe).precheck(flux_checkpoints[variant], request)


def test_step_caches_are_refused_before_loading(flux_checkpoints) -> None:
    with pytest.raises(ConfigError, match="single-stream"):
        Omni(flux_checkpoints["flux2"], cache="teacache")
