"""LTX-2 text to video (with its sound) against diffusers' LTX2Pipeline: its default guidance
(CFG, audio CFG, modality isolation, rescale), a negative prompt, every guidance term off,
another size, length and frame rate; step batching, the prompt cache and the request checks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omni_core import InvalidRequestError

#: Small but real settings: 32x32 (16x16 latent pixels), 5 frames (3 latent frames), 2 steps.
SMALL: dict[str, Any] = {"height": 32, "width": 32, "num_frames": 5, "num_inference_steps": 2}
PROMPT = "a red cat walks on the grass"
#: omni's extras under diffusers' argument names.
DIFFUSERS_NAMES = {"fps": "frame_rate", "stg_blocks": "spatio_temporal_guidance_blocks"}
#: Every guidance term off: one conditional forward per step.
UNGUIDED = {"audio_guidance_scale": 1.0, "modality_scale": 1.0, "audio_modality_scale": 1.0}


def diffusers_kwargs(args: dict[str, Any], extras: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in args.items() if k != "seed"}
    out.update({DIFFUSERS_NAMES.get(k, k): v for k, v in extras.items()})
    if "frame_rate" in out:
        out["frame_rate"] = float(out["frame_rate"])
    return out


CASES = [
    ({}, {}),  # diffusers' defaults: CFG 3, audio CFG 7, modality 3, rescale 0.7
    ({"guidance_scale": 4.0, "negative_prompt": "blurry"}, {"guidance_rescale": 0.0}),
    ({"guidance_scale": 1.0}, UNGUIDED),
    ({"height": 32, "width": 64, "num_frames": 9}, {"fps": 12, "audio_guidance_scale": 3.0}),
    ({"num_frames": 9}, {"fps": 12, "motion_speed": 0.5}),  # positions at 24 fps, played at 12
]


@pytest.mark.parametrize(
    ("kwargs", "extras"),
    CASES,
    ids=["defaults", "cfg-negative", "unguided", "64x32x9-12fps", "12fps-slow-motion"],
)
def test_text_to_video_and_sound_match_diffusers(
    kwargs, extras, ltx_model, ltx_reference, reference, worst_difference, worst_audio
) -> None:
    args = {**SMALL, **kwargs}
    ours = ltx_model.generate(PROMPT, seed=3, extras=extras, **args)
    frames, sound = reference(ltx_reference, 3, prompt=PROMPT, **diffusers_kwargs(args, extras))
    assert worst_difference(ours.video, frames) <= 1
    assert worst_audio(ours.audio, sound) <= 1e-4
    assert ours.video.dtype == np.uint8 and ours.audio.dtype == np.float32
    assert ours.video.shape == (args["num_frames"], args["height"], args["width"], 3)
    assert ours.sample_rate == 16000 and ours.audio.shape[1] == 2
    assert ours.fps == extras.get("fps", 24)


def test_prompt_guidance_and_rate_change_the_output(ltx_model) -> None:
    """The parity cases prove something only if each input matters on the tiny model."""

    def run(prompt: str = PROMPT, **extras: Any) -> Any:
        return ltx_model.generate(prompt, seed=3, extras=extras, **SMALL)

    base = run()
    for other in (run("a lighthouse at dusk"), run(**UNGUIDED), run(modality_scale=1.0)):
        assert np.abs(base.video.astype(int) - other.video.astype(int)).max() > 10
        assert np.abs(base.audio - other.audio).max() > 1e-3
    assert len(run(fps=12).audio) > len(base.audio)  # the same frames last twice as long


def test_the_frame_rate_conditions_the_model(ltx_model) -> None:
    """``fps`` is more than the MP4's rate: the transformer gets ``fps / motion_speed`` (the
    rotary positions are in seconds), so at one playback rate and one sound length, another
    conditioning rate is another video."""
    seen: list[float] = []
    transformer = ltx_model.pipeline.transformer
    hook = transformer.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["fps"]), with_kwargs=True
    )
    try:
        twelve = ltx_model.generate(PROMPT, seed=3, extras={"fps": 12}, **SMALL)
        slow = ltx_model.generate(PROMPT, seed=3, extras={"fps": 12, "motion_speed": 0.5}, **SMALL)
    finally:
        hook.remove()
    assert set(seen) == {12.0, 24.0}
    assert slow.fps == twelve.fps == 12 and slow.audio.shape == twelve.audio.shape
    assert np.abs(slow.video.astype(int) - twelve.video.astype(int)).max() > 10


def test_batched_equals_alone_in_one_forward_per_pass(
    ltx_model, worst_difference, forwards
) -> None:
    omni = ltx_model
    specs = [
        {"prompt": PROMPT, "seed": 1},
        {"prompt": "a lighthouse at dusk", "guidance_scale": 1.0, "seed": 2, "extras": UNGUIDED},
        {"prompt": "a red cat", "seed": 3, "num_inference_steps": 3, "negative_prompt": "text"},
    ]
    requests = [omni.request(**{**SMALL, **s}) for s in specs]
    alone = [omni.run([r.model_copy()])[0] for r in requests]
    with forwards(omni.pipeline.transformer) as calls:
        together = omni.run(requests)
    # Steps 1-2: 3 conditional + 2 unconditional rows, then the 2 modality-isolation rows;
    # step 3: the 3-step request's CFG pair and its isolation row.
    assert calls.rows == [5, 2, 5, 2, 2, 1]
    for a, b in zip(alone, together, strict=True):
        assert worst_difference(b.video, a.video.astype(float)) <= 1
        assert np.abs(a.audio - b.audio).max() <= 1e-5


def test_stg_without_perturbable_attention_costs_no_forward(ltx_model, forwards) -> None:
    """LTX-2.0's blocks have no STG perturbation: diffusers' STG pass would equal the
    conditional one, so omni skips it (the defaults case above equals diffusers with it)."""
    with forwards(ltx_model.pipeline.transformer) as calls:
        ltx_model.generate(PROMPT, seed=3, extras={"stg_blocks": [0, 1]}, **SMALL)
    assert calls.rows == [2, 1, 2, 1]


def test_prompt_cache_encodes_a_shared_negative_prompt_once(ltx_model) -> None:
    kwargs = {**SMALL, "negative_prompt": "watermark"}
    ltx_model.generate("a cat", seed=0, **kwargs)
    again = ltx_model.generate("a frog", seed=0, **kwargs)
    assert again.timings["prompt_cache_hits"] == 1.0


def test_warmup_request_is_one_small_step(ltx_model) -> None:
    from omni_core import GenerationRequest

    pipeline = ltx_model.pipeline
    checked = pipeline.validate(GenerationRequest(**pipeline.warmup_fields()))
    # Two steps: the checkpoint's shift_terminal schedule is undefined for one.
    assert (checked.num_frames, checked.num_inference_steps, checked.height) == (1, 2, 32)


def test_defaults_are_diffusers(ltx_model) -> None:
    checked = ltx_model.pipeline.validate(ltx_model.request("a cat"))
    assert (checked.height, checked.width, checked.num_frames) == (512, 768, 121)
    assert checked.num_inference_steps == 30 and checked.guidance_scale == 3.0
    extras = checked.extras
    assert (extras["fps"], extras["audio_guidance_scale"], extras["modality_scale"]) == (24, 7, 3)


@pytest.mark.parametrize(
    ("kwargs", "param", "words"),
    [
        ({"height": 40}, "size", "multiples of 32"),
        ({"num_frames": 6}, "num_frames", "2k\\+1"),
        ({"images": [b"not read"]}, "images", "takes no input image"),
        ({"extras": {"fps": 0}}, "fps", "greater than or equal to 1"),
        ({"extras": {"motion_speed": 0}}, "motion_speed", "greater than 0"),
        ({"extras": {"true_cfg_scale": 2.0}}, "true_cfg_scale", "Extra inputs"),
        ({"num_outputs": 2}, "n", "one video per request"),
        ({"num_inference_steps": 1}, "num_inference_steps", "at least 2 steps"),
    ],
)
def test_bad_requests_are_refused_before_any_compute(kwargs, param, words, ltx_checkpoint) -> None:
    from omni_core import GenerationRequest
    from omni_ltx.pipeline import LTXPipeline

    request = GenerationRequest(prompt="x", **{"width": 32, "height": 32, **kwargs})
    with pytest.raises(InvalidRequestError, match=words) as info:
        LTXPipeline.precheck(ltx_checkpoint, request)
    assert info.value.param == param


def test_registered_and_imports_only_faces(ltx_model) -> None:
    from pathlib import Path

    import omni_ltx
    from omni_core.testing import assert_imports_only_faces, assert_plugin_discoverable

    registry = assert_plugin_discoverable("omni-ltx")
    assert registry.pipelines["ltx-2-t2v"].architectures == ("LTX2Pipeline",)
    assert registry.pipelines["ltx-2-i2v"].architectures == ("LTX2ImageToVideoPipeline",)
    assert registry.denoiser_for("LTX2VideoTransformer3DModel") is not None
    assert {"ltx-2-512x768x121", "ltx-2-512x768x49", "tiny-ltx-2"} <= set(registry.benchmarks)
    assert ltx_model.spec.name == "ltx-2-t2v"
    package = Path(omni_ltx.__file__).parent
    runtime = [p for p in package.glob("*.py") if p.stem not in ("testing", "bench")]
    assert_imports_only_faces(runtime, test_kit=False)
    assert_imports_only_faces([package / "testing.py", *Path(__file__).parent.glob("*.py")])


def test_attention_roles_say_which_modules_attend_to_another_sequence(ltx_model) -> None:
    """LTX2Attention does not mark its cross-attention, so the plugin names it: the text and the
    audio/video cross-attentions are ``cross`` (exact under the fp8 mode), the two
    self-attentions ``self``."""
    blocks = len(ltx_model.pipeline.transformer.transformer_blocks)
    assert ltx_model.pipeline.routing["routed"] == {
        "self": 2 * blocks,
        "cross": 4 * blocks,
        "joint": 0,
    }
