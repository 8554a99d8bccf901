"""A multi-speaker script through omni equals transformers' ``generate()`` on the same inputs.

The reference's inputs are built here from the processor alone (a conversation with one turn
per line and each speaker's voice prompt as an audio part, ``apply_chat_template``), not by the
pipeline. The checkpoint has 160-sample frames (a voice prompt is fewer tokens) and weights seed
5, with which the tiny model still speaks after voice prompts (with seed 0 it ends at once).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from omni_core import InvalidRequestError, Omni
from omni_core.speech import ReferenceVoice
from omni_core.testing import run_queued_together

from omni_vibevoice.testing import build_tiny_vibevoice

SCRIPT = "Speaker 1: Hello there.\nSpeaker 2: Hi!\nSpeaker 1: A longer sentence, to speak."
LINES = [(1, "Hello there."), (2, "Hi!"), (1, "A longer sentence, to speak.")]
#: Two voice prompts: 0.1 s of noise each (16-bit values, as a decoded upload holds).
WAVES = {
    s: (np.round(np.random.default_rng(s - 1).standard_normal(2400) * 3277) / 32768).astype(
        np.float32
    )
    for s in (1, 2)
}
ATOL = 1e-4


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("vibevoice-dialogue") / "tiny"
    return build_tiny_vibevoice(folder, seed=5, ratios=(4, 5, 8))


@pytest.fixture(scope="module")
def omni(checkpoint: Path) -> Omni:
    return Omni(checkpoint, device="cpu")


@pytest.fixture(scope="module")
def reference(checkpoint: Path) -> Any:
    """``generate()`` on a conversation: (lines, voice prompts by speaker, seed) -> audio."""
    from transformers import AutoProcessor, VibeVoiceForConditionalGeneration

    model = VibeVoiceForConditionalGeneration.from_pretrained(checkpoint).eval()
    processor = AutoProcessor.from_pretrained(checkpoint)

    def run(lines: list[tuple[int, str]], prompts: dict[int, np.ndarray], seed: int) -> Any:
        conversation, given = [], set()
        for speaker, text in lines:
            parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
            if speaker in prompts and speaker not in given:
                parts.append({"type": "audio", "audio": prompts[speaker]})
                given.add(speaker)
            conversation.append({"role": str(speaker), "content": parts})
        inputs = processor.apply_chat_template(
            conversation, tokenize=True, return_dict=True, return_tensors="pt"
        )
        torch.manual_seed(seed)
        audio = model.generate(**inputs, return_dict_in_generate=True).audio[0]
        return np.zeros(0, np.float32) if audio is None else audio.reshape(-1).float().numpy()

    return run


def _voices(*speakers: int) -> dict[str, ReferenceVoice]:
    return {str(s): ReferenceVoice(audio=WAVES[s], sample_rate=24000) for s in speakers}


def _same(omni: Omni, expected: np.ndarray, prompt: str, **fields: Any) -> int:
    """omni's audio equals ``expected`` (none: omni says so); the samples compared."""
    if not expected.size:  # generate() made no audio: omni refuses to return an empty file
        with pytest.raises(InvalidRequestError, match="no audio"):
            omni.generate(prompt, **fields)
        return 0
    result = omni.generate(prompt, **fields)
    assert result.audio.shape == expected.shape
    np.testing.assert_allclose(result.audio, expected, atol=ATOL)
    return expected.size


def test_a_dialogue_with_a_voice_per_speaker_equals_generate(omni: Omni, reference: Any) -> None:
    spoken = 0
    for seed in (0, 1):
        both = _voices(1, 2)
        spoken += _same(omni, reference(LINES, WAVES, seed), SCRIPT, seed=seed, speakers=both)
        # one cloned speaker, the other in the model's own voice; labels as "Speaker 1", speaker_1
        one = {"speaker_1": _voices(1)["1"]}
        expected = reference(LINES, {1: WAVES[1]}, seed)
        spoken += _same(omni, expected, SCRIPT, seed=seed, speakers=one)
        # a built-in voice: speaker 2's lines spoken as speaker 3
        relabelled = [(3 if s == 2 else s, t) for s, t in LINES]
        moved = {"Speaker 2": "speaker_3", **_voices(1)}
        spoken += _same(
            omni, reference(relabelled, {1: WAVES[1]}, seed), SCRIPT, seed=seed, speakers=moved
        )
    assert spoken > 0  # the tiny model spoke after the voice prompts
    # streamed deltas concatenate to the whole answer
    whole = omni.generate(SCRIPT, seed=0, speakers=_voices(1, 2)).audio
    chunks = [c.samples for c in omni.stream(SCRIPT, seed=0, speakers=_voices(1, 2))]
    assert whole.size and chunks
    np.testing.assert_allclose(np.concatenate(chunks), whole, atol=ATOL)


def test_dialogues_batched_by_the_engine_equal_each_alone(omni: Omni, reference: Any) -> None:
    asks: list[dict[str, Any]] = [
        {"prompt": SCRIPT, "seed": 0, "speakers": _voices(1, 2)},
        {"prompt": SCRIPT, "seed": 1, "speakers": _voices(1, 2)},
        {"prompt": "A longer sentence, to speak.", "seed": 0},
    ]
    expected = [
        reference(LINES, WAVES, 0),
        reference(LINES, WAVES, 1),
        reference([(0, "A longer sentence, to speak.")], {}, 0),
    ]
    runtime = omni.pipeline.shared_runtime()
    steps, rows = runtime.steps, runtime.rows
    results = run_queued_together(omni, asks, name="vibevoice")
    assert runtime.rows - rows > runtime.steps - steps  # requests shared decode steps
    for result, audio in zip(results, expected, strict=True):
        np.testing.assert_allclose(result.audio, audio, atol=ATOL)


@pytest.mark.parametrize(
    ("prompt", "speakers", "match"),
    [
        (SCRIPT, {"7": "speaker_0"}, "not a speaker label"),
        (SCRIPT, {"3": "speaker_0"}, "Speaker 3 says nothing"),
        (SCRIPT, {"1": "nobody"}, "unknown voice 'nobody'"),
        ("Speaker 5: Hi!", {}, "speakers 0..3"),
        (SCRIPT, {str(i): "speaker_0" for i in range(5)}, "at most 4"),
    ],
)
def test_bad_speakers_are_refused_before_any_compute(
    omni: Omni, prompt: str, speakers: dict[str, str], match: str
) -> None:
    with pytest.raises(InvalidRequestError, match=match) as caught:
        omni.request(prompt, speakers=speakers)
    assert caught.value.param in {"speakers", "input"}
