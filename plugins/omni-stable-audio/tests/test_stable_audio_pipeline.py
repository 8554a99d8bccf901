"""Stable Audio against diffusers' StableAudioPipeline (with and without CFG, a negative prompt,
a start offset), step batching, and the request checks before any compute."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omni_core import InvalidRequestError

#: Small but real settings: 3 steps of the second-order SDE solver, 0.2 s of the tiny's 0.256 s.
SMALL: dict[str, Any] = {"num_inference_steps": 3}
#: The issue's bar for audio: within 1e-4 of diffusers (the waveform is float32).
TOLERANCE = 1e-4


class Forwards:
    """Counts the DiT's forward calls and the rows of each."""

    def __init__(self, module: Any) -> None:
        self.rows: list[int] = []
        self.handle = module.register_forward_pre_hook(self._hook)

    def _hook(self, module: Any, args: Any) -> None:
        self.rows.append(int(args[0].shape[0]))

    def __enter__(self) -> Forwards:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.handle.remove()


def _worst(ours: np.ndarray, reference: np.ndarray) -> float:
    assert ours.shape == reference.shape
    assert reference.std() > 0.05, "near-silent audio: the comparison would prove nothing"
    return float(np.abs(ours - reference).max())


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        ({"duration_s": 0.2}, {"audio_end_in_s": 0.2}),  # CFG 7, unconditional zeros
        (
            {"duration_s": 0.2, "negative_prompt": "noise", "guidance_scale": 4.0},
            {"audio_end_in_s": 0.2, "negative_prompt": "noise", "guidance_scale": 4.0},
        ),
        (
            {"duration_s": 0.25, "guidance_scale": 1.0},
            {"audio_end_in_s": 0.25, "guidance_scale": 1.0},
        ),
        (
            {"audio_start_s": 0.05, "duration_s": 0.15},
            {"audio_start_in_s": 0.05, "audio_end_in_s": 0.2},
        ),
        ({}, {}),  # the defaults: the whole clip
    ],
    ids=["cfg", "cfg-negative", "no-cfg", "start-offset", "defaults"],
)
def test_text_to_audio_matches_diffusers(
    ours, theirs, audio_model, audio_reference, reference_audio
) -> None:
    result = audio_model.generate("a dog barking in the rain", seed=3, **SMALL, **ours)
    reference = reference_audio(
        audio_reference, 3, prompt="a dog barking in the rain", **SMALL, **theirs
    )
    assert _worst(result.audio, reference) <= TOLERANCE
    assert result.sample_rate == 16000 and result.audio.shape[1] == 2
    assert result.info["cfg"] is ((ours.get("guidance_scale") or 7.0) > 1.0)


def test_diffusers_names_in_extras_mean_the_same(audio_model) -> None:
    shared = audio_model.generate("thunder", seed=1, audio_start_s=0.05, duration_s=0.1, **SMALL)
    named = audio_model.generate(
        "thunder", seed=1, audio_start_in_s=0.05, audio_end_in_s=0.15, **SMALL
    )
    assert shared.audio.shape == (1600, 2)
    assert np.array_equal(shared.audio, named.audio)


def test_cfg_and_the_prompt_change_the_audio(audio_model) -> None:
    """The fidelity cases prove something only if each input matters on the tiny model."""
    base = audio_model.generate("a dog barking", seed=3, duration_s=0.2, **SMALL).audio
    plain = audio_model.generate(
        "a dog barking", seed=3, duration_s=0.2, guidance_scale=1.0, **SMALL
    ).audio
    other = audio_model.generate("thunder and rain", seed=3, duration_s=0.2, **SMALL).audio
    assert np.abs(base - plain).max() > 0.05 and np.abs(base - other).max() > 0.05


def test_batched_equals_alone_in_one_forward_per_step(audio_model) -> None:
    omni = audio_model
    specs = [
        {"prompt": "a dog barking", "seed": 1, "guidance_scale": 1.0, "duration_s": 0.2},
        {"prompt": "thunder and rain", "seed": 2, "duration_s": 0.1, "audio_start_s": 0.1},
        {"prompt": "a hammer", "seed": 3, "negative_prompt": "noise", "num_inference_steps": 4},
    ]
    requests = [omni.request(**{**SMALL, **s}) for s in specs]
    alone = [omni.run([r.model_copy()])[0] for r in requests]
    with Forwards(omni.pipeline.transformer) as calls:
        together = omni.run(requests)
    # Steps 1-3: 1 + 2 + 2 rows in one forward; the 4-step request finishes alone (CFG: 2).
    assert calls.rows == [5, 5, 5, 2]
    for a, b in zip(alone, together, strict=True):
        assert _worst(b.audio, a.audio) <= TOLERANCE


def test_defaults_are_diffusers(audio_model) -> None:
    checked = audio_model.pipeline.validate(audio_model.request("a cat"))
    assert checked.num_inference_steps == 100 and checked.guidance_scale == 7.0
    assert (checked.audio_start_s, checked.duration_s) == (0.0, 0.256)
    assert checked.sample_rate == 16000


@pytest.mark.parametrize(
    ("kwargs", "param", "words"),
    [
        ({"duration_s": 1.0}, "duration_s", "at most 0.256 s"),
        ({"audio_start_s": 0.2, "duration_s": 0.1}, "duration_s", "from a start at 0.2 s"),
        ({"audio_start_s": 0.3}, "audio_start_s", "clips end at 0.256 s"),
        ({"num_outputs": 2}, "num_outputs", "one clip per request"),
        ({"width": 64}, "width", "from text alone"),
        ({"sample_rate": 44100}, "sample_rate", "does not resample"),
        ({"extras": {"audio_end_in_s": 0.1}, "duration_s": 0.1}, "audio_end_in_s", "not both"),
        ({"extras": {"eta": 0.5}}, "eta", "Extra inputs"),
    ],
)
def test_bad_requests_are_refused_before_any_compute(
    kwargs, param, words, audio_checkpoint
) -> None:
    from omni_stable_audio.pipeline import StableAudioPipeline

    from omni_core import GenerationRequest

    request = GenerationRequest(prompt="x", **kwargs)
    with pytest.raises(InvalidRequestError, match=words) as info:
        StableAudioPipeline.precheck(audio_checkpoint, request)
    assert info.value.param == param


def test_registered_and_imports_only_faces(audio_model) -> None:
    from pathlib import Path

    import omni_stable_audio

    from omni_core.testing import assert_imports_only_faces, assert_plugin_discoverable

    registry = assert_plugin_discoverable("omni-stable-audio")
    spec = registry.pipelines["stable-audio"]
    assert spec.architectures == ("StableAudioPipeline",)
    assert spec.tasks == ("t2a",) and spec.modality == "audio"
    assert registry.denoiser_for("StableAudioDiTModel") is not None
    assert audio_model.spec.name == "stable-audio"
    package = Path(omni_stable_audio.__file__).parent
    runtime = [p for p in package.glob("*.py") if p.stem != "testing"]
    assert_imports_only_faces(runtime, test_kit=False)
    assert_imports_only_faces([package / "testing.py", *Path(__file__).parent.glob("*.py")])
