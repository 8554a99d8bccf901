"""Dia through omni equals transformers' ``generate()`` on a tiny random checkpoint.

Greedy codes (the frames ``DiaProcessor.batch_decode`` hands DAC) and the waveform, alone and
batched by the engine, whole and streamed, with and without a voice prompt. The checkpoint's
channel-0 end logit is scaled so that its clips end on their own (after 10-35 positions), and
``max_new_tokens`` tests the other end, generate()'s forced one.
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

from omni_dia.testing import reference_generate

TEXTS = ["[S1] Hello there.", "[S1] Hello there. [S2] Hi!", "[S2] A longer sentence, to speak."]
#: A voice prompt (0.02 s of noise at 44.1 kHz: 111 DAC frames of the tiny codec) and its text.
PROMPT = (np.random.default_rng(0).standard_normal(882) * 0.1).astype(np.float32)
TRANSCRIPT = "[S1] Some words."
#: float32 on the CPU; measured: 0 (the same DAC calls on the same codes).
ATOL = 1e-4


def _omni_speech(omni: Omni, **fields: Any) -> tuple[torch.Tensor, np.ndarray, list[int]]:
    """(frames handed to the codec ``[channels, n]``, the audio, each chunk's samples) of one
    request."""
    stream = omni.pipeline.open(omni.request(**fields))
    chunks = [c.samples for c in stream]
    channels = omni.pipeline.model.config.decoder_config.num_channels
    audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    return stream.all_codes()[:channels].long(), audio, [len(c) for c in chunks]


def _voice() -> ReferenceVoice:
    return ReferenceVoice(audio=PROMPT, sample_rate=44100, transcript=TRANSCRIPT)


def test_greedy_speech_equals_transformers_generate(omni: Omni, checkpoint: Path) -> None:
    assert omni.spec.name == "dia"
    assert [v.id for v in omni.pipeline.voices()] == ["default"]
    lengths = set()
    for text in TEXTS:
        frames, expected = reference_generate(checkpoint, text)
        codes, audio, _ = _omni_speech(omni, prompt=text, temperature=0, voice="default")
        assert torch.equal(codes, frames.long()), text
        assert audio.shape == expected.shape and audio.size > 0
        np.testing.assert_allclose(audio, expected.numpy(), atol=ATOL)
        lengths.add(frames.shape[1])
    assert len(lengths) == len(TEXTS)  # each clip ended on its own, at its own length
    # no guidance (guidance_scale 1: generate() runs the conditioned rows alone)
    frames, expected = reference_generate(checkpoint, TEXTS[0], guidance_scale=1.0)
    codes, audio, _ = _omni_speech(omni, prompt=TEXTS[0], temperature=0, guidance_scale=1)
    assert torch.equal(codes, frames.long())
    np.testing.assert_allclose(audio, expected.numpy(), atol=ATOL)
    # ... where this text ends at once (generate()'s first position is channel 0's end, which
    # batch_decode cannot decode): no audio, no error
    _, audio, _ = _omni_speech(omni, prompt=TEXTS[1], temperature=0, guidance_scale=1)
    assert audio.size == 0
    # generate()'s max_new_tokens: channel 0 is made to end 15 positions before it
    frames, expected = reference_generate(checkpoint, TEXTS[2], max_new_tokens=20)
    codes, audio, _ = _omni_speech(omni, prompt=TEXTS[2], temperature=0, max_new_tokens=20)
    assert frames.shape[1] == 4 and torch.equal(codes, frames.long())
    np.testing.assert_allclose(audio, expected.numpy(), atol=ATOL)


def test_streamed_chunks_are_the_whole_clip(omni: Omni, checkpoint: Path) -> None:
    """DAC is not causal: each chunk is decoded with its receptive field of frames on both
    sides, so the streamed deltas are the samples of the whole clip decoded at once."""
    _, expected = reference_generate(checkpoint, TEXTS[0])
    frame = omni.pipeline.shared_runtime().stages.codec.samples_per_frame
    assert expected.shape[0] > 8 * frame
    _, audio, chunks = _omni_speech(omni, prompt=TEXTS[0], temperature=0, stream=True)
    assert len(chunks) >= 2 and chunks[0] == 8 * frame  # first_chunk_frames
    np.testing.assert_allclose(audio, expected.numpy(), atol=1e-5)


def test_a_voice_prompt_clones_as_generate_does(omni: Omni, checkpoint: Path) -> None:
    text = "[S2] Hello there."
    frames, expected = reference_generate(checkpoint, f"{TRANSCRIPT} {text}", audio=PROMPT)
    codes, audio, _ = _omni_speech(omni, prompt=text, temperature=0, reference=_voice())
    assert torch.equal(codes, frames.long())
    np.testing.assert_allclose(audio, expected.numpy(), atol=ATOL)
    plain = omni.generate(text, temperature=0).audio
    assert plain.shape != audio.shape or not np.allclose(plain, audio)
    with pytest.raises(InvalidRequestError, match="ref_text"):
        omni.generate(text, reference=ReferenceVoice(audio=PROMPT, sample_rate=44100))


def test_sampling_is_seeded_per_request(omni: Omni) -> None:
    """The checkpoint samples by default (temperature 1.8, top-k 45, top-p 0.95)."""
    first = omni.generate(TEXTS[1], seed=1).audio
    assert np.array_equal(first, omni.generate(TEXTS[1], seed=1).audio)
    others = [omni.generate(TEXTS[1], seed=s).audio for s in (2, 3)]
    assert any(o.shape != first.shape or not np.array_equal(o, first) for o in others)


def test_requests_batched_by_the_engine_equal_each_alone(omni: Omni, checkpoint: Path) -> None:
    """Three requests of different text lengths and prompt lengths (one cloned, one sampled)
    share decode steps; each equals the same request alone."""
    asks: list[dict[str, Any]] = [
        {"prompt": TEXTS[0], "temperature": 0},
        {"prompt": "[S2] Hello there.", "temperature": 0, "reference": _voice()},
        {"prompt": TEXTS[2], "seed": 4, "stream": True},
    ]
    alone = [_omni_speech(omni, **a)[1] for a in asks]
    runtime = omni.pipeline.shared_runtime()
    steps, rows = runtime.steps, runtime.rows
    results = run_queued_together(omni, asks, name="dia")
    assert runtime.rows - rows > runtime.steps - steps  # requests shared decode steps
    for result, audio in zip(results, alone, strict=True):
        assert result.audio.shape == audio.shape and audio.size > 0
        np.testing.assert_allclose(result.audio, audio, atol=ATOL)


def test_bad_requests_name_their_field(omni: Omni) -> None:
    with pytest.raises(InvalidRequestError, match="voice"):
        omni.generate(TEXTS[0], voice="nobody")
    with pytest.raises(InvalidRequestError) as error:
        omni.generate("x" * 1100)
    assert error.value.param == "input"
    with pytest.raises(InvalidRequestError, match="max_new_tokens"):
        omni.generate(TEXTS[0], max_new_tokens=4)


def test_a_clip_that_never_ends_stops_where_generate_does(tmp_path: Path) -> None:
    """Without ``max_new_tokens`` generate() stops at the config's ``max_length`` plus the
    delays, counted after the prompt (a voice prompt's too)."""
    from omni_dia.testing import build_tiny_dia

    checkpoint = build_tiny_dia(tmp_path / "endless", eos_scale=1.0, max_length=40)
    omni = Omni(checkpoint, device="cpu")
    for text, voice in ((TEXTS[0], None), ("[S2] Hi.", _voice())):
        prompt = f"{TRANSCRIPT} {text}" if voice else text
        frames, expected = reference_generate(checkpoint, prompt, audio=voice and PROMPT)
        codes, audio, _ = _omni_speech(omni, prompt=text, temperature=0, reference=voice)
        assert frames.shape[1] == 39 and torch.equal(codes, frames.long())
        np.testing.assert_allclose(audio, expected.numpy(), atol=ATOL)
