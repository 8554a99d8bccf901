"""Pocket TTS through omni equals transformers' ``generate()`` on a tiny random checkpoint.

The latents (``PocketTTSGenerateOutput.audio_latents``, up to its mask) and the waveform of
``PocketTTSProcessor.decode``: greedy and seeded (after ``torch.manual_seed``), alone and batched
by the engine, whole and streamed, in the built-in voice, a cloned one and with no voice, with
``generate()``'s own options. The tiny checkpoint's clips end on their own (after 9-55 frames);
an end-of-speech threshold no logit reaches tests the other end, generate()'s frame budget.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from omni_core import InvalidRequestError, Omni
from omni_core.speech import ReferenceVoice
from omni_core.testing import run_queued_together

from omni_pocket_tts.testing import build_tiny_pocket_tts, reference_generate

TEXTS = ["Hello there.", "Hello there, how are you?", "A longer sentence, to speak, today."]
#: A voice prompt: 0.3 s of noise at 24 kHz (the processor ends it on a pause: 5 frames).
PROMPT = (np.random.default_rng(0).standard_normal(7200) * 0.1).astype(np.float32)
#: float32 on the CPU; measured: 0 (the same modules on the same inputs).
ATOL = 1e-4


def _omni_speech(omni: Omni, **fields: Any) -> tuple[torch.Tensor, np.ndarray, list[int]]:
    """(latents handed to the codec ``[frames, latent_dim]``, the audio, each chunk's samples)
    of one request."""
    stream = omni.pipeline.open(omni.request(**fields))
    chunks = [c.samples for c in stream]
    audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    return stream.all_codes().T.float(), audio, [len(c) for c in chunks]


def _alba(omni: Omni) -> torch.Tensor:
    return omni.pipeline.voice_latents("alba")


def _same(omni: Omni, expected: tuple[torch.Tensor, torch.Tensor], **fields: Any) -> None:
    latents, audio, _ = _omni_speech(omni, **fields)
    assert latents.shape == expected[0].shape and latents.shape[0] > 0
    torch.testing.assert_close(latents, expected[0].float(), atol=ATOL, rtol=0)
    assert audio.shape == expected[1].shape
    np.testing.assert_allclose(audio, expected[1].numpy(), atol=ATOL)


def test_greedy_speech_equals_transformers_generate(omni: Omni, checkpoint: Path) -> None:
    assert omni.spec.name == "pocket-tts"
    assert [v.id for v in omni.pipeline.voices()] == ["alba"]  # the checkpoint's voices/
    lengths = set()
    for text in TEXTS:
        expected = reference_generate(checkpoint, text, voice=_alba(omni))
        _same(omni, expected, prompt=text, temperature=0)  # the default voice: the first one
        lengths.add(expected[0].shape[0])
    assert len(lengths) == len(TEXTS)  # each clip ended on its own, at its own length
    expected = reference_generate(checkpoint, TEXTS[0], voice=_alba(omni))
    _same(omni, expected, prompt=TEXTS[0], temperature=0, voice="alba")


def test_a_seeded_request_equals_generate_after_manual_seed(omni: Omni, checkpoint: Path) -> None:
    """The checkpoint samples by default (temperature 0.7): the noise is generate()'s draws."""
    for text, seed in ((TEXTS[0], 5), (TEXTS[1], 11)):
        expected = reference_generate(checkpoint, text, voice=_alba(omni), seed=seed)
        _same(omni, expected, prompt=text, seed=seed)
    hot = reference_generate(checkpoint, TEXTS[0], voice=_alba(omni), seed=2, temperature=1.5)
    _same(omni, hot, prompt=TEXTS[0], seed=2, temperature=1.5)
    first = omni.generate(TEXTS[0], seed=1).audio
    assert np.array_equal(first, omni.generate(TEXTS[0], seed=1).audio)
    other = omni.generate(TEXTS[0], seed=2).audio
    assert other.shape != first.shape or not np.array_equal(other, first)


def test_generate_options_are_request_fields(omni: Omni, checkpoint: Path) -> None:
    """``num_flow_steps``, ``eos_threshold``, ``min_frames_before_eos``, ``frames_after_eos``
    and ``max_new_tokens`` as generate() reads them."""
    options: list[dict[str, Any]] = [
        {"num_flow_steps": 3},
        {"eos_threshold": 2.5, "min_frames_before_eos": 2},
        {"frames_after_eos": 0},
        {"max_new_tokens": 4},
    ]
    lengths = []
    for extra in options:
        expected = reference_generate(checkpoint, TEXTS[1], voice=_alba(omni), **extra)
        _same(omni, expected, prompt=TEXTS[1], temperature=0, **extra)
        lengths.append(expected[0].shape[0])
    assert lengths[-1] == 4 and len(set(lengths)) > 1


def test_streamed_chunks_are_the_whole_clip(omni: Omni) -> None:
    """The codec is causal over a bounded window: each chunk decoded after that many frames of
    context is the samples of the whole clip decoded at once."""
    _, whole, _ = _omni_speech(omni, prompt=TEXTS[1], temperature=0)
    _, audio, chunks = _omni_speech(omni, prompt=TEXTS[1], temperature=0, stream=True)
    frame = omni.pipeline.stages().codec.samples_per_frame
    assert len(chunks) >= 3 and chunks[0] == 2 * frame and chunks[1] == 8 * frame
    assert audio.shape == whole.shape
    np.testing.assert_allclose(audio, whole, atol=1e-5)


def test_a_voice_prompt_clones_as_generate_does(omni: Omni, checkpoint: Path) -> None:
    """Reference audio (its transcript is not read: Pocket TTS clones from audio alone)."""
    expected = reference_generate(checkpoint, TEXTS[0], audio=PROMPT)
    voice = ReferenceVoice(audio=PROMPT, sample_rate=24000)
    _same(omni, expected, prompt=TEXTS[0], temperature=0, reference=voice)
    at_16k = ReferenceVoice(audio=PROMPT[::3].copy(), sample_rate=8000)  # resampled to 24 kHz
    assert omni.generate(TEXTS[0], temperature=0, reference=at_16k).audio.size > 0
    plain = omni.generate(TEXTS[0], temperature=0).audio
    assert plain.shape != expected[1].shape or not np.allclose(plain, expected[1].numpy())


def test_requests_batched_by_the_engine_equal_each_alone(omni: Omni) -> None:
    """Four requests of different prompts, voices, flow steps and sampling share decode steps;
    each equals the same request alone."""
    asks: list[dict[str, Any]] = [
        {"prompt": TEXTS[0], "temperature": 0},
        {"prompt": TEXTS[1], "temperature": 0, "reference": ReferenceVoice(PROMPT, 24000)},
        {"prompt": TEXTS[2], "seed": 4, "stream": True},
        {"prompt": TEXTS[1], "seed": 9, "num_flow_steps": 2},
    ]
    alone = [_omni_speech(omni, **a)[1] for a in asks]
    runtime = omni.pipeline.shared_runtime()
    steps, rows = runtime.steps, runtime.rows
    results = run_queued_together(omni, asks, name="pocket-tts")
    assert runtime.rows - rows > runtime.steps - steps  # requests shared decode steps
    for result, audio in zip(results, alone, strict=True):
        assert result.audio.shape == audio.shape and audio.size > 0
        np.testing.assert_allclose(result.audio, audio, atol=ATOL)


def test_bad_requests_name_their_field(omni: Omni) -> None:
    with pytest.raises(InvalidRequestError, match="voice"):
        omni.generate(TEXTS[0], voice="nobody")
    for field in ("top_p", "top_k"):
        with pytest.raises(InvalidRequestError) as error:
            omni.generate(TEXTS[0], **{field: 0.5 if field == "top_p" else 5})
        assert error.value.param == field
    with pytest.raises(InvalidRequestError, match="max_new_tokens"):
        omni.generate(TEXTS[0], max_new_tokens=5000)
    with pytest.raises(InvalidRequestError, match="num_flow_steps"):
        omni.generate(TEXTS[0], num_flow_steps=0)


def test_a_checkpoint_without_voices_speaks_without_a_prompt(
    checkpoint: Path, tmp_path: Path
) -> None:
    """No ``voices/``: one voice, ``default``, the model without a voice prompt; and a clip
    that never ends stops at generate()'s budget, ``ceil((text tokens / 3 + 2) * 12.5)``."""
    bare = tmp_path / "bare"
    shutil.copytree(checkpoint, bare)
    shutil.rmtree(bare / "voices")
    omni = Omni(bare, device="cpu")
    assert [v.id for v in omni.pipeline.voices()] == ["default"]
    _same(omni, reference_generate(bare, TEXTS[2]), prompt=TEXTS[2], temperature=0)
    endless = build_tiny_pocket_tts(tmp_path / "endless", eos_threshold=1e9)
    omni = Omni(endless, device="cpu")
    expected = reference_generate(endless, "Hi.", voice=_alba(omni))
    assert expected[0].shape[0] == 42  # "Hi." and the prompt's spacer: 4 text tokens
    _same(omni, expected, prompt="Hi.", temperature=0)


def test_a_hub_id_loads_from_the_cache_offline(
    omni: Omni, checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Hub id is a huggingface-hub snapshot (offline: the cached one), its codec folder and
    voices inside it; the same speech as the local folder."""
    import huggingface_hub.constants

    repo = tmp_path / "hub" / "models--kyutai-test--pocket-tts"
    shutil.copytree(checkpoint, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    hub = Omni("kyutai-test/pocket-tts", device="cpu")
    assert [v.id for v in hub.pipeline.voices()] == ["alba"]
    expected = omni.generate(TEXTS[0], temperature=0).audio
    np.testing.assert_array_equal(hub.generate(TEXTS[0], temperature=0).audio, expected)
    with pytest.raises(Exception, match="not in the Hugging Face cache"):
        Omni("kyutai-test/absent", device="cpu")
