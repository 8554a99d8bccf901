"""FLUX.1 text-to-image against diffusers' FluxPipeline, step batching, the prompt cache and the
request checks (all before any compute)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omni_core import GenerationRequest, InvalidRequestError

SMALL = {"height": 64, "width": 64, "num_inference_steps": 2}
T5 = {"max_sequence_length": 32}


class Forwards:
    """Counts a module's forward calls and the batch rows of each (to prove batching)."""

    def __init__(self, module: Any) -> None:
        self.rows: list[int] = []
        self.handle = module.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: Any, args: Any, kwargs: Any) -> None:
        tensor = kwargs.get("hidden_states", kwargs.get("input_ids", args[0] if args else None))
        self.rows.append(int(tensor.shape[0]))

    def __enter__(self) -> Forwards:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.handle.remove()


def _pixels(image: Any) -> np.ndarray:
    return np.asarray(image).astype(np.int16)


# -- fidelity ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variant", "kwargs"),
    [
        ("dev", {"guidance_scale": 5.0, **T5}),
        ("dev", {}),  # diffusers' defaults: embedded guidance 3.5, 512 T5 tokens
        ("dev", {"height": 48, "width": 80, "prompt_2": "a lighthouse at dusk", **T5}),
        ("schnell", {**T5}),
    ],
    ids=["dev-guidance5", "dev-defaults", "dev-48x80-prompt2", "schnell"],
)
def test_text_to_image_matches_diffusers(
    variant, kwargs, flux_models, flux_references, run_reference, assert_same
) -> None:
    args = {**SMALL, **kwargs}
    ours = flux_models[variant].generate("a red cat", seed=3, **args)
    reference = run_reference(flux_references[variant], 3, prompt="a red cat", **args)
    assert_same(ours.images, reference)
    assert ours.info["cfg"] is False
    assert ours.images[0].size == (args["width"], args["height"])


def test_true_cfg_with_two_outputs_matches_diffusers(
    flux_models, flux_references, run_reference, assert_same
) -> None:
    args = {**SMALL, **T5, "negative_prompt": "blurry", "true_cfg_scale": 4.0}
    ours = flux_models["dev"].generate("a red cat", num_outputs=2, seed=5, **args)
    reference = run_reference(
        flux_references["dev"], 5, prompt="a red cat", num_images_per_prompt=2, **args
    )
    assert ours.info["cfg"] is True
    assert_same(ours.images, reference)
    assert np.abs(_pixels(ours.images[0]) - _pixels(ours.images[1])).max() > 0


def test_bf16_latents_are_bit_equal_to_diffusers(flux_checkpoints) -> None:
    """In bf16 the embedded guidance, the true-CFG mix and the Euler update round as diffusers'
    do: the final latents are bit-equal, with the CFG branches batched into one forward and
    with QKV fused (both on by default) as well as without."""
    import diffusers
    import torch

    from omni_core import Omni

    path = flux_checkpoints["dev"]
    reference = diffusers.FluxPipeline.from_pretrained(path, dtype=torch.bfloat16)
    reference.set_progress_bar_config(disable=True)
    kwargs = {"height": 64, "width": 96, "num_inference_steps": 3, **T5}
    cfg = {"negative_prompt": "blurry", "true_cfg_scale": 3.3, "guidance_scale": 4.0}
    expected = reference(
        "a red cat",
        output_type="latent",
        generator=torch.Generator("cpu").manual_seed(0),
        **cfg,
        **kwargs,
    ).images
    for options in ({}, {"cfg_batch": "never", "fuse_qkv": False}):
        omni = Omni(path, device="cpu", dtype="bfloat16", **options)
        state = omni.pipeline.prepare(omni.request("a red cat", seed=0, **cfg, **kwargs))
        while not state.done:
            omni.pipeline.step([state])
        assert state.latents.dtype == torch.bfloat16
        assert torch.equal(state.latents, expected), options


# -- batching ----------------------------------------------------------------------------------


def test_batched_equals_alone_in_one_forward_per_step(flux_models) -> None:
    omni = flux_models["dev"]
    specs = [
        {"prompt": "a red cat", "guidance_scale": 3.5, "seed": 1},
        {"prompt": "a green frog on a leaf", "guidance_scale": 6.0, "seed": 2, "num_outputs": 2},
        {"prompt": "a dog", "seed": 3, "num_inference_steps": 3},
    ]
    requests = [omni.request(**{**SMALL, **T5, **s}) for s in specs]
    alone = omni.run([r.model_copy() for r in requests[:1]]) + [
        omni.run([r])[0] for r in requests[1:]
    ]
    with Forwards(omni.pipeline.transformer) as calls:
        together = omni.run(requests)
    # Steps 1-2 carry all four rows in one forward; the 3-step request finishes alone.
    assert calls.rows == [4, 4, 1]
    for a, b in zip(alone, together, strict=True):
        for ia, ib in zip(a.images, b.images, strict=True):
            assert np.abs(_pixels(ia) - _pixels(ib)).max() <= 1


def test_true_cfg_branches_share_the_forward_of_other_requests(flux_models) -> None:
    omni = flux_models["dev"]
    cfg = {"negative_prompt": "blurry", **SMALL, **T5}
    requests = [
        omni.request("a cat", true_cfg_scale=2.0, seed=4, **cfg),
        omni.request("a dog", true_cfg_scale=5.0, seed=5, **cfg),
        omni.request("a frog", seed=6, **{**SMALL, **T5}),  # no CFG: its own batch
    ]
    alone = [omni.run([r])[0] for r in requests]
    with Forwards(omni.pipeline.transformer) as calls:
        together = omni.run(requests)
    assert sorted(calls.rows) == [1, 1, 4, 4]  # [cond x2; uncond x2] per step, and the third
    for a, b in zip(alone, together, strict=True):
        assert np.abs(_pixels(a.images[0]) - _pixels(b.images[0])).max() <= 1


def test_requests_at_different_steps_share_a_forward(flux_models) -> None:
    """Continuous batching: a request joining mid-way keeps its own timesteps and sigmas."""
    omni = flux_models["dev"]
    pipe = omni.pipeline
    first, second = (
        omni.request(p, seed=s, num_inference_steps=n, height=64, width=64, **T5)
        for p, s, n in (("a cat", 4, 4), ("a dog", 5, 3))
    )
    alone = [omni.run([r])[0].images[0] for r in (first, second)]
    a, b = pipe.prepare(first), pipe.prepare(second)
    pipe.step([a])
    assert pipe.batch_key(a) == pipe.batch_key(b)
    with Forwards(pipe.transformer) as calls:
        while not a.done:
            pipe.step([s for s in (a, b) if not s.done])
    assert calls.rows == [2, 2, 2]
    for state, expected in zip((a, b), alone, strict=True):
        got = _pixels(pipe.decode(state).images[0])
        assert np.abs(got - _pixels(expected)).max() <= 1


def test_what_cannot_share_a_step_gets_its_own_key(flux_models) -> None:
    omni = flux_models["dev"]
    pipe = omni.pipeline

    def key(**kwargs: Any) -> Any:
        return pipe.batch_key(pipe.prepare(omni.request("a", seed=0, **kwargs)))

    base = key(height=64, width=64, **T5)
    assert key(height=64, width=64, guidance_scale=7.0, **T5) == base  # per-row guidance
    assert key(height=64, width=96, **T5) != base
    assert key(height=64, width=64, max_sequence_length=48) != base
    assert key(height=64, width=64, negative_prompt="x", true_cfg_scale=2.0, **T5) != base


# -- prompt cache ------------------------------------------------------------------------------


def test_prompt_cache_skips_both_text_encoders(flux_models) -> None:
    omni = flux_models["dev"]
    pipe = omni.pipeline
    args = {"negative_prompt": "cache neg", "true_cfg_scale": 2.0, **SMALL, **T5}
    with Forwards(pipe.prompts.text_encoder) as clip, Forwards(pipe.prompts.text_encoder_2) as t5:
        first = omni.generate("a prompt for the cache test", seed=0, **args)
        assert len(clip.rows) == len(t5.rows) == 2  # prompt and negative prompt
        second = omni.generate("a prompt for the cache test", seed=1, **args)
        assert len(clip.rows) == len(t5.rows) == 2  # both from the cache
        omni.generate("a prompt for the cache test", seed=1, **{**args, "max_sequence_length": 40})
        assert len(t5.rows) == 4  # another T5 length is another embedding
    assert first.timings["prompt_cache_hits"] == 0.0
    assert second.timings["prompt_cache_hits"] == second.timings["prompt_cache_lookups"] == 2.0


# -- bad input: clear errors before any compute ------------------------------------------------

BAD = [
    ("dev", {"height": 100, "width": 64}, "multiples of 16", "size"),
    ("dev", {"height": 64, "width": 8}, "nearest are 16", "size"),
    ("dev", {"num_frames": 5}, "num_frames", "num_frames"),
    ("dev", {"true_cfg_scale": 3.0}, "needs a negative_prompt", "true_cfg_scale"),
    ("dev", {"max_sequence_length": 513}, "max_sequence_length", "max_sequence_length"),
    ("dev", {"unknown": 1}, "extras.unknown", "unknown"),
    ("dev", {"images": [b"not a png"]}, "text-to-image and takes no input image", "images"),
    ("schnell", {"guidance_scale": 3.5}, "not guidance-distilled", "guidance_scale"),
]


@pytest.mark.parametrize(("variant", "kwargs", "match", "param"), BAD)
def test_bad_requests_are_refused_before_any_compute(
    variant, kwargs, match, param, flux_models, flux_checkpoints
) -> None:
    omni = flux_models[variant]
    pipe = omni.pipeline
    shared = {k: v for k, v in kwargs.items() if k in GenerationRequest.model_fields}
    extras = {k: v for k, v in kwargs.items() if k not in shared}
    request = GenerationRequest(prompt="x", extras=extras, **shared)
    with Forwards(pipe.transformer) as t_calls, Forwards(pipe.prompts.text_encoder) as e_calls:
        with pytest.raises(InvalidRequestError, match=match) as info:
            pipe.validate(request)
        assert info.value.param == param
        with pytest.raises(InvalidRequestError, match=match):
            type(pipe).precheck(flux_checkpoints[variant], request)  # configs only, no weights
    assert t_calls.rows == e_calls.rows == []


def test_defaults_follow_the_checkpoint(flux_models) -> None:
    dev = flux_models["dev"].pipeline.validate(GenerationRequest(prompt="x"))
    assert (dev.width, dev.height, dev.num_inference_steps, dev.guidance_scale) == (
        1024,
        1024,
        28,
        3.5,
    )
    assert dev.extras["max_sequence_length"] == 512 and dev.extras["true_cfg_scale"] == 1.0
    schnell = flux_models["schnell"].pipeline.validate(GenerationRequest(prompt="x"))
    assert (schnell.num_inference_steps, schnell.guidance_scale) == (4, None)
    # schnell takes diffusers' documented guidance_scale=0.0 (no guidance) as well
    assert (
        flux_models["schnell"]
        .pipeline.validate(GenerationRequest(prompt="x", guidance_scale=0.0))
        .guidance_scale
        is None
    )


def test_registered_with_its_denoiser_and_attention_routed(flux_models) -> None:
    from omni_core.testing import assert_plugin_discoverable

    registry = assert_plugin_discoverable("omni-flux")
    specs = registry.pipelines
    assert specs["flux"].architectures == ("FluxPipeline",)
    assert specs["flux-kontext"].architectures == ("FluxKontextPipeline",)
    assert all(specs[n].capabilities.step_batching for n in ("flux", "flux-kontext"))
    assert registry.denoiser_for("FluxTransformer2DModel") is not None
    omni = flux_models["dev"]
    assert omni.spec.name == "flux"
    result = omni.generate("a cat", seed=0, **SMALL, **T5)
    # 1 double-stream block (joint attention) and 2 single-stream blocks (self attention)
    assert result.info["attention"]["routed"] == {"self": 2, "cross": 0, "joint": 1}
    assert omni.pipeline.accel.fused_qkv == {"transformer": 3}


def test_the_plugin_imports_omni_core_through_its_faces_only() -> None:
    """Built as a third-party plugin would be: the runtime code never reaches past the faces
    (nor into the test kit, which only ``testing`` and the tests use)."""
    from pathlib import Path

    import omni_flux
    from omni_core.testing import assert_imports_only_faces

    package = Path(omni_flux.__file__).parent
    runtime = [p for p in package.glob("*.py") if p.stem not in ("testing", "tiny_flux2")]
    assert len(runtime) > 10
    assert_imports_only_faces(runtime, test_kit=False)
    assert_imports_only_faces([*package.glob("testing.py"), *Path(__file__).parent.glob("*.py")])
