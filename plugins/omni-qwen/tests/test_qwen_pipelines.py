"""Qwen-Image pipelines against diffusers, batching, the prompt cache and request checks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omni_core import GenerationRequest, InvalidRequestError
from omni_core.testing import run_to_completion

SIZE = {"height": 64, "width": 96}
STEPS = 3


def _ours(pipe: Any, **kwargs: Any) -> list[Any]:
    request = pipe.validate(GenerationRequest(**{**SIZE, "num_inference_steps": STEPS, **kwargs}))
    (result,) = run_to_completion(pipe, [request])
    return result


def _reference(pipe: Any, seed: int = 0, **kwargs: Any) -> list[Any]:
    import torch

    return pipe(
        **{**SIZE, "num_inference_steps": STEPS, **kwargs},
        generator=torch.Generator("cpu").manual_seed(seed),
    ).images


def _assert_same(ours: list[Any], reference: list[Any]) -> None:
    assert len(ours) == len(reference)
    for a, b in zip(ours, reference, strict=True):
        assert a.size == b.size
        pa, pb = np.asarray(a).astype(int), np.asarray(b).astype(int)
        assert pa.std() > 5, "degenerate image: the comparison would prove nothing"
        assert np.abs(pa - pb).max() <= 1, "more than 1/255 away from diffusers"


class CountCalls:
    """Counts forward calls of a module (to prove batching and cache hits)."""

    def __init__(self, module: Any) -> None:
        self.count = 0
        self.batch_sizes: list[int] = []
        self.handle = module.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: Any, args: Any, kwargs: Any) -> None:
        self.count += 1
        tensor = kwargs.get("hidden_states", kwargs.get("input_ids"))
        if tensor is not None:
            self.batch_sizes.append(int(tensor.shape[0]))

    def __enter__(self) -> CountCalls:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.handle.remove()


# -- fidelity ---------------------------------------------------------------------------------


def test_t2i_matches_diffusers_with_true_cfg(qwen_pipelines, qwen_references) -> None:
    prompt, negative = "a red cat sitting on a mat", " "
    ours = _ours(
        qwen_pipelines["t2i"], prompt=prompt, negative_prompt=negative, guidance_scale=4.0, seed=3
    )
    reference = _reference(
        qwen_references["t2i"], seed=3, prompt=prompt, negative_prompt=negative, true_cfg_scale=4.0
    )
    assert ours.info["cfg"] is True
    _assert_same(ours.images, reference)


def test_t2i_matches_diffusers_without_cfg_and_two_outputs(qwen_pipelines, qwen_references):
    ours = _ours(qwen_pipelines["t2i"], prompt="a blue hat", num_outputs=2, seed=5)
    reference = _reference(
        qwen_references["t2i"], seed=5, prompt="a blue hat", num_images_per_prompt=2
    )
    assert ours.info["cfg"] is False
    _assert_same(ours.images, reference)
    assert np.abs(np.asarray(ours.images[0], int) - np.asarray(ours.images[1], int)).max() > 0


def test_true_cfg_scale_alias_equals_guidance_scale(qwen_pipelines) -> None:
    pipe = qwen_pipelines["t2i"]
    common = {"prompt": "a cat", "negative_prompt": "blurry", "seed": 1}
    a = _ours(pipe, guidance_scale=2.5, **common)
    b = _ours(pipe, extras={"true_cfg_scale": 2.5}, **common)
    assert np.array_equal(np.asarray(a.images[0]), np.asarray(b.images[0]))
    with pytest.raises(InvalidRequestError, match="disagree"):
        pipe.validate(GenerationRequest(guidance_scale=3.0, extras={"true_cfg_scale": 2.5}))


def test_edit_matches_diffusers(qwen_pipelines, qwen_references, qwen_images) -> None:
    kwargs = {"prompt": "make it blue", "negative_prompt": " ", "seed": 7}
    ours = _ours(qwen_pipelines["edit"], images=[qwen_images[0]], guidance_scale=4.0, **kwargs)
    reference = _reference(
        qwen_references["edit"],
        seed=7,
        image=qwen_images[0],
        prompt="make it blue",
        negative_prompt=" ",
        true_cfg_scale=4.0,
    )
    _assert_same(ours.images, reference)


def test_edit_plus_matches_diffusers_with_two_images(qwen_pipelines, qwen_references, qwen_images):
    images = qwen_images[:2]
    ours = _ours(
        qwen_pipelines["edit-plus"],
        images=images,
        prompt="put the cat from picture 1 on picture 2",
        negative_prompt=" ",
        guidance_scale=4.0,
        seed=11,
    )
    reference = _reference(
        qwen_references["edit-plus"],
        seed=11,
        image=list(images),
        prompt="put the cat from picture 1 on picture 2",
        negative_prompt=" ",
        true_cfg_scale=4.0,
    )
    _assert_same(ours.images, reference)


def test_edit_default_size_follows_the_input_image(qwen_pipelines, qwen_images) -> None:
    pipe = qwen_pipelines["edit"]
    request = pipe.validate(GenerationRequest(prompt="x", images=[qwen_images[0]]))
    # 120x80 input: 1024x1024 area at 3:2, rounded to the model's multiple (32 here).
    assert (request.width, request.height) == (1248, 832)
    assert request.guidance_scale == 4.0 and request.num_inference_steps == 50


# -- batching ----------------------------------------------------------------------------------


def test_batched_equals_unbatched_t2i(qwen_pipelines) -> None:
    pipe = qwen_pipelines["t2i"]
    specs = [
        {"prompt": "a red cat", "negative_prompt": " ", "guidance_scale": 4.0, "seed": 1},
        {
            "prompt": "a green frog on a leaf",
            "negative_prompt": "blurry",
            "guidance_scale": 2.0,
            "seed": 2,
            "num_outputs": 2,
        },
        {
            "prompt": "a dog",
            "negative_prompt": " ",
            "guidance_scale": 6.0,
            "seed": 3,
            "num_inference_steps": 2,
        },
    ]
    requests = [
        pipe.validate(GenerationRequest(**{**SIZE, "num_inference_steps": STEPS, **s}))
        for s in specs
    ]
    alone = [run_to_completion(pipe, [r])[0] for r in requests]
    rows = 1 + 2 + 1
    # always: every step runs all three requests, cond and uncond rows, in ONE forward;
    # auto: the prompts differ in length, so cond rows and uncond rows are two forwards.
    for mode, per_step in (("always", [2 * rows]), ("auto", [rows, rows])):
        pipe.options.extra["cfg_batch"] = mode
        try:
            with CountCalls(pipe.transformer) as calls:
                together = run_to_completion(pipe, requests)
        finally:
            pipe.options.extra.pop("cfg_batch")
        assert calls.batch_sizes[: len(per_step)] == per_step, mode
        assert calls.count == STEPS * len(per_step)
        for a, b in zip(alone, together, strict=True):
            for ia, ib in zip(a.images, b.images, strict=True):
                assert np.abs(np.asarray(ia, int) - np.asarray(ib, int)).max() <= 1, mode


def test_batched_equals_unbatched_edit(qwen_pipelines, qwen_images) -> None:
    pipe = qwen_pipelines["edit"]
    base = {**SIZE, "num_inference_steps": 2, "images": [qwen_images[0]], "guidance_scale": 4.0}
    requests = [
        pipe.validate(GenerationRequest(prompt=p, negative_prompt=" ", seed=i, **base))
        for i, p in enumerate(("make it blue", "add a hat"))
    ]
    alone = [run_to_completion(pipe, [r])[0] for r in requests]
    with CountCalls(pipe.transformer) as calls:
        together = run_to_completion(pipe, requests)
    # Both requests in each forward; " " and the prompts differ in length: cond, then uncond.
    assert calls.batch_sizes == [2, 2, 2, 2]
    for a, b in zip(alone, together, strict=True):
        diff = np.abs(np.asarray(a.images[0], int) - np.asarray(b.images[0], int)).max()
        assert diff <= 1


def test_different_sizes_do_not_share_a_step(qwen_pipelines) -> None:
    pipe = qwen_pipelines["t2i"]
    a = pipe.prepare(pipe.validate(GenerationRequest(prompt="a", height=64, width=64, seed=0)))
    b = pipe.prepare(pipe.validate(GenerationRequest(prompt="a", height=64, width=96, seed=0)))
    c = pipe.prepare(pipe.validate(GenerationRequest(prompt="b", height=64, width=96, seed=1)))
    assert pipe.batch_key(a) != pipe.batch_key(b) == pipe.batch_key(c)


# -- prompt cache ------------------------------------------------------------------------------


def test_prompt_cache_skips_the_text_encoder(qwen_pipelines) -> None:
    pipe = qwen_pipelines["t2i"]
    kwargs = {
        "prompt": "a unique prompt for the cache test",
        "negative_prompt": "cache neg",
        "guidance_scale": 4.0,
        "num_inference_steps": 2,
        "seed": 0,
    }
    with CountCalls(pipe.text_encoder) as calls:
        first = _ours(pipe, **kwargs)
        assert calls.count == 2  # prompt and negative prompt
        second = _ours(pipe, **{**kwargs, "seed": 1})
        assert calls.count == 2  # both from the cache
    assert first.timings["prompt_cache_hits"] == 0.0
    assert second.timings["prompt_cache_hits"] == second.timings["prompt_cache_lookups"] == 2.0
    assert 0.0 < second.timings["prompt_cache_hit_rate"] <= 1.0
    # A different max_sequence_length is a different embedding: a miss.
    with CountCalls(pipe.text_encoder) as calls:
        _ours(pipe, **kwargs, extras={"max_sequence_length": 4})
        assert calls.count == 2


def test_prompt_cache_is_keyed_by_the_input_images(qwen_pipelines, qwen_images) -> None:
    pipe = qwen_pipelines["edit"]
    kwargs = {"prompt": "cache edit", "num_inference_steps": 2, "seed": 0, **SIZE}
    with CountCalls(pipe.text_encoder) as calls:
        pipe.prepare(pipe.validate(GenerationRequest(images=[qwen_images[2]], **kwargs)))
        pipe.prepare(pipe.validate(GenerationRequest(images=[qwen_images[2]], **kwargs)))
        assert calls.count == 1
        pipe.prepare(pipe.validate(GenerationRequest(images=[qwen_images[1]], **kwargs)))
        assert calls.count == 2


# -- bad input: clear errors before any compute ------------------------------------------------


def _bad(pipe: Any, path: Any, match: str, **kwargs: Any) -> None:
    request = GenerationRequest(**kwargs)
    with CountCalls(pipe.transformer) as t_calls, CountCalls(pipe.text_encoder) as e_calls:
        with pytest.raises(InvalidRequestError, match=match):
            pipe.validate(request)
        with pytest.raises(InvalidRequestError, match=match):
            type(pipe).precheck(path, request)  # from the configs alone, no weights
    assert t_calls.count == e_calls.count == 0


def test_edit_without_an_image_is_refused(qwen_pipelines, qwen_checkpoints) -> None:
    for variant in ("edit", "edit-plus"):
        _bad(qwen_pipelines[variant], qwen_checkpoints[variant], "edits an image", prompt="x")


def test_unreadable_image_is_refused(qwen_pipelines, qwen_checkpoints, tmp_path) -> None:
    pipe, path = qwen_pipelines["edit"], qwen_checkpoints["edit"]
    _bad(pipe, path, "could not be read", prompt="x", images=[b"this is not a png"])
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    _bad(pipe, path, "could not be read", prompt="x", images=[str(broken)])
    _bad(pipe, path, "expected an image", prompt="x", images=[12])


def test_too_many_images_are_refused(qwen_pipelines, qwen_checkpoints, qwen_images) -> None:
    _bad(
        qwen_pipelines["edit"],
        qwen_checkpoints["edit"],
        "at most 1 input image",
        prompt="x",
        images=qwen_images[:2],
    )
    _bad(
        qwen_pipelines["edit-plus"],
        qwen_checkpoints["edit-plus"],
        "at most 3 input images",
        prompt="x",
        images=[*qwen_images, qwen_images[0]],
    )
    _bad(
        qwen_pipelines["t2i"],
        qwen_checkpoints["t2i"],
        "text-to-image",
        prompt="x",
        images=qwen_images[:1],
    )


def test_sizes_the_model_cannot_make_are_refused(qwen_pipelines, qwen_checkpoints) -> None:
    pipe, path = qwen_pipelines["t2i"], qwen_checkpoints["t2i"]
    # The tiny VAE downsamples 16x: sizes come in multiples of 32 px.
    _bad(pipe, path, "multiples of 32", prompt="x", height=100, width=64)
    _bad(pipe, path, "multiples of 32", prompt="x", height=64, width=16)
    _bad(pipe, path, "num_frames", prompt="x", num_frames=5)
    _bad(pipe, path, "at least 2 steps", prompt="x", num_inference_steps=1)
    _bad(pipe, path, "extras.unknown", prompt="x", extras={"unknown": 1})
    _bad(pipe, path, "max_sequence_length", prompt="x", extras={"max_sequence_length": 5000})


# -- through the registry and the Omni API -------------------------------------------------------


def test_registered_and_served_through_omni(qwen_checkpoints) -> None:
    from omni_core import Omni
    from omni_core.testing import assert_plugin_discoverable

    specs = assert_plugin_discoverable("omni-qwen").pipelines
    assert specs["qwen-image"].architectures == ("QwenImagePipeline",)
    assert specs["qwen-image-edit-plus"].architectures == ("QwenImageEditPlusPipeline",)
    assert all(specs[n].capabilities.step_batching for n in ("qwen-image", "qwen-image-edit"))
    omni = Omni(qwen_checkpoints["t2i"], device="cpu", dtype="float32")
    assert omni.spec.name == "qwen-image"
    result = omni.generate(
        "a cat", negative_prompt=" ", true_cfg_scale=3.0, num_inference_steps=2, seed=0, **SIZE
    )
    assert result.images[0].size == (96, 64)
    assert result.info["guidance_scale"] == 3.0
    assert result.info["attention"]["routed"]["joint"] == 2
    with pytest.raises(InvalidRequestError):
        omni.generate("a cat", height=70, width=64)


def test_bf16_rounding_matches_diffusers(qwen_checkpoints) -> None:
    """In bf16 the CFG mix and Euler update round exactly as diffusers' do (latents bit-equal).

    With ``cfg_batch="never"`` (and "auto" here: the prompts differ in length) the forwards are
    the reference's own; batching both branches into one forward ("always") changes only matmul
    blocking / masked-attention rounding (bounded below).
    """
    import diffusers
    import torch

    from omni_core.testing import pipeline_options
    from omni_qwen.pipelines import QwenImagePipeline

    path = qwen_checkpoints["t2i"]
    reference = diffusers.QwenImagePipeline.from_pretrained(path, dtype=torch.bfloat16)
    reference.set_progress_bar_config(disable=True)
    options = pipeline_options(dtype=torch.bfloat16)
    ours = QwenImagePipeline.from_pretrained(path, options)
    kwargs = {"height": 64, "width": 96, "num_inference_steps": 3}
    expected = reference(
        "a red cat",
        negative_prompt="blurry",
        true_cfg_scale=3.3,
        output_type="latent",
        generator=torch.Generator("cpu").manual_seed(0),
        **kwargs,
    ).images
    for mode, tolerance in (("never", 0.0), ("auto", 0.0), ("always", 0.1)):
        options.extra["cfg_batch"] = mode
        state = ours.prepare(
            ours.validate(
                GenerationRequest(
                    prompt="a red cat",
                    negative_prompt="blurry",
                    guidance_scale=3.3,
                    seed=0,
                    **kwargs,
                )
            )
        )
        while not state.done:
            ours.step([state])
        assert state.latents.dtype == torch.bfloat16
        assert (state.latents.float() - expected.float()).abs().max().item() <= tolerance, mode


def test_equal_length_cfg_branches_share_one_forward(qwen_pipelines) -> None:
    pipe = qwen_pipelines["t2i"]
    # The same text as prompt and negative prompt: equal lengths, so "auto" batches the pair.
    with CountCalls(pipe.transformer) as calls:
        result = _ours(pipe, prompt="a cat", negative_prompt="a cat", guidance_scale=4.0, seed=0)
    assert calls.batch_sizes == [2] * STEPS
    assert result.info["cfg"] is True


def test_requests_at_different_steps_share_a_forward(qwen_pipelines) -> None:
    """Continuous batching: a request joining mid-way keeps its own timesteps and sigmas."""
    pipe = qwen_pipelines["t2i"]
    make = [
        {"prompt": "a cat", "negative_prompt": "a dog", "seed": 4, "num_inference_steps": 4},
        {"prompt": "a dog", "negative_prompt": "a cat", "seed": 5, "num_inference_steps": 3},
    ]
    requests = [pipe.validate(GenerationRequest(**SIZE, guidance_scale=4.0, **m)) for m in make]
    alone = [run_to_completion(pipe, [r])[0].images[0] for r in requests]
    first, second = (pipe.prepare(r) for r in requests)
    pipe.step([first])
    assert pipe.batch_key(first) == pipe.batch_key(second)
    with CountCalls(pipe.transformer) as calls:
        while not first.done:
            pipe.step([s for s in (first, second) if not s.done])
    # Every forward carries both requests: 4 rows (CFG pair batched) or 2 (cond, then uncond).
    assert sum(calls.batch_sizes) == 3 * 4 and set(calls.batch_sizes) <= {2, 4}
    for state, expected in zip((first, second), alone, strict=True):
        got = np.asarray(pipe.decode(state).images[0], int)
        assert np.abs(got - np.asarray(expected, int)).max() <= 1
