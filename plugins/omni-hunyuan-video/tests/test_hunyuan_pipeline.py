"""HunyuanVideo-1.5 text-to-video against diffusers' HunyuanVideo15Pipeline (the checkpoint
guider's CFG, a negative prompt, CFG off, another size and length), step batching, the prompt
cache and the request checks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omni_core import InvalidRequestError

#: Small but real settings: 32x48 (2x3 latent pixels), 5 frames (2 latent frames), 2 steps.
SMALL: dict[str, Any] = {"height": 32, "width": 48, "num_frames": 5, "num_inference_steps": 2}
#: A prompt with quoted glyph text, so the ByT5 branch carries tokens too.
PROMPT = 'a shop sign that says "OPEN"'


class Forwards:
    """Counts the transformer's forward calls and the rows of each."""

    def __init__(self, module: Any) -> None:
        self.rows: list[int] = []
        self.handle = module.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: Any, args: Any, kwargs: Any) -> None:
        self.rows.append(int(kwargs["hidden_states"].shape[0]))

    def __enter__(self) -> Forwards:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.handle.remove()


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # the checkpoint guider's scale (6), the empty negative prompt
        {"guidance_scale": 4.0, "negative_prompt": "blurry"},
        {"guidance_scale": 1.0},  # CFG off
        {"guidance_scale": 3.0, "height": 48, "width": 32, "num_frames": 9},
    ],
    ids=["guider", "cfg-negative", "no-cfg", "48x32x9"],
)
def test_text_to_video_matches_diffusers(
    kwargs, hunyuan_model, hunyuan_reference, reference_frames, worst_difference
) -> None:
    args = {**SMALL, **kwargs}
    ours = hunyuan_model.generate(PROMPT, seed=3, **args)
    scale = args.pop("guidance_scale", 6.0)
    reference = reference_frames(hunyuan_reference, 3, scale, prompt=PROMPT, **args)
    assert worst_difference(ours.video, reference) <= 1
    assert ours.video.dtype == np.uint8
    assert ours.video.shape == (args["num_frames"], args["height"], args["width"], 3)
    assert ours.info["cfg"] is (scale != 1.0) and ours.fps == 24


def test_prompt_guidance_and_glyph_text_change_the_video(hunyuan_model) -> None:
    """The parity cases prove something only if each input matters on the tiny model."""

    def video(prompt: str, scale: float) -> np.ndarray:
        return hunyuan_model.generate(prompt, seed=3, guidance_scale=scale, **SMALL).video

    base = video(PROMPT, 6.0).astype(int)
    others = (
        video(PROMPT, 1.0),
        video("a red cat", 6.0),
        video(PROMPT.replace("OPEN", "SHUT"), 6.0),
    )
    for other in others:
        assert np.abs(base - other.astype(int)).max() > 10


def test_batched_equals_alone_in_one_forward_per_step(hunyuan_model, worst_difference) -> None:
    omni = hunyuan_model
    specs = [
        {"prompt": PROMPT, "seed": 1},
        {"prompt": "a lighthouse at dusk", "guidance_scale": 1.0, "seed": 2},
        {"prompt": "a red cat", "seed": 3, "num_inference_steps": 3, "negative_prompt": "text"},
    ]
    requests = [omni.request(**{**SMALL, **s}) for s in specs]
    alone = [omni.run([r.model_copy()])[0] for r in requests]
    with Forwards(omni.pipeline.transformer) as calls:
        together = omni.run(requests)
    # Steps 1-2: 3 conditional + 2 unconditional rows in one forward; then the 3-step one (CFG).
    assert calls.rows == [5, 5, 2]
    for a, b in zip(alone, together, strict=True):
        assert worst_difference(b.video, a.video.astype(float)) <= 1


def test_prompt_cache_encodes_a_shared_negative_prompt_once(hunyuan_model) -> None:
    kwargs = {**SMALL, "num_inference_steps": 1, "negative_prompt": "watermark"}
    hunyuan_model.generate("a cat", seed=0, **kwargs)
    again = hunyuan_model.generate("a frog", seed=0, **kwargs)
    assert again.timings["prompt_cache_hits"] == 1.0


def test_warmup_request_is_one_small_step(hunyuan_model) -> None:
    from omni_core import GenerationRequest

    pipeline = hunyuan_model.pipeline
    checked = pipeline.validate(GenerationRequest(**pipeline.warmup_fields()))
    assert (checked.num_frames, checked.num_inference_steps, checked.height) == (1, 1, 256)


def test_defaults_are_diffusers(hunyuan_model) -> None:
    checked = hunyuan_model.pipeline.validate(hunyuan_model.request("a cat"))
    assert (checked.height, checked.width) == (480, 848)  # the 16:9 bucket of 640
    assert checked.num_frames == 121 and checked.num_inference_steps == 50
    assert checked.guidance_scale == 6.0  # the checkpoint guider's


@pytest.mark.parametrize(
    ("kwargs", "param", "words"),
    [
        ({"height": 40}, "size", "multiples of 16"),
        ({"num_frames": 6}, "num_frames", "4k\\+1"),
        ({"images": [b"not read"]}, "images", "takes no input image"),
        ({"extras": {"fps": 0}}, "fps", "greater than or equal to 1"),
        ({"extras": {"true_cfg_scale": 2.0}}, "true_cfg_scale", "Extra inputs"),
        ({"num_outputs": 2}, "n", "one video per request"),
    ],
)
def test_bad_requests_are_refused_before_any_compute(
    kwargs, param, words, hunyuan_checkpoint
) -> None:
    from omni_core import GenerationRequest
    from omni_hunyuan_video.pipeline import HunyuanVideoPipeline

    request = GenerationRequest(prompt="x", **{"width": 32, "height": 32, **kwargs})
    with pytest.raises(InvalidRequestError, match=words) as info:
        HunyuanVideoPipeline.precheck(hunyuan_checkpoint, request)
    assert info.value.param == param


def test_registered_and_imports_only_faces(hunyuan_model) -> None:
    from pathlib import Path

    import omni_hunyuan_video
    from omni_core.testing import assert_imports_only_faces, assert_plugin_discoverable

    registry = assert_plugin_discoverable("omni-hunyuan-video")
    assert registry.pipelines["hunyuan-video-1.5-t2v"].architectures == ("HunyuanVideo15Pipeline",)
    assert registry.pipelines["hunyuan-video-1.5-i2v"].architectures == (
        "HunyuanVideo15ImageToVideoPipeline",
    )
    assert registry.denoiser_for("HunyuanVideo15Transformer3DModel") is not None
    assert hunyuan_model.spec.name == "hunyuan-video-1.5-t2v"
    package = Path(omni_hunyuan_video.__file__).parent
    runtime = [p for p in package.glob("*.py") if p.stem != "testing"]
    assert_imports_only_faces(runtime, test_kit=False)
    assert_imports_only_faces([package / "testing.py", *Path(__file__).parent.glob("*.py")])


def test_bf16_video_equals_diffusers_bf16(hunyuan_checkpoint, reference_frames, worst_difference):
    """In bfloat16 too: the noise drawn in the transformer's dtype, the CFG mix in it, the Euler
    step in float32 cast back, as diffusers does. diffusers runs CFG's branches as two forwards
    and bfloat16 kernels are not batch-invariant, so ``batch_rows=False`` runs them so too; the
    batched forward (the default) stays close."""
    import diffusers
    import torch

    from omni_core import Omni

    args = {**SMALL, "negative_prompt": "blurry"}
    pipe = diffusers.HunyuanVideo15Pipeline.from_pretrained(
        hunyuan_checkpoint, dtype=torch.bfloat16
    )
    pipe.set_progress_bar_config(disable=True)
    reference = reference_frames(pipe, 5, 6.0, prompt=PROMPT, **args)
    alone = Omni(hunyuan_checkpoint, device="cpu", dtype="bfloat16", batch_rows=False)
    assert worst_difference(alone.generate(PROMPT, seed=5, **args).video, reference) <= 1
    batched = Omni(hunyuan_checkpoint, device="cpu", dtype="bfloat16")
    video = batched.generate(PROMPT, seed=5, **args).video
    assert np.abs(video.astype(float) - reference).mean() < 4
