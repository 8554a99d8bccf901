"""Each pipeline reproduces transformers' own generation for the same checkpoint and seed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from omni_core.speech import split_sentences


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().reshape(-1).numpy()


def test_tts_plugin_registers_every_family(omni_tts) -> None:
    from omni_core.testing import assert_plugin_discoverable

    pipelines = assert_plugin_discoverable("omni-tts").pipelines
    for name in ("vits", "speecht5", "fastspeech2-conformer", "csm", "piper"):
        assert pipelines[name].plugin == "omni-tts" and pipelines[name].modality == "speech"
        assert pipelines[name].capabilities.streaming
    assert omni_tts("vits").spec.name == "vits"
    assert omni_tts("speecht5").spec.name == "speecht5"
    assert omni_tts("fastspeech2").spec.name == "fastspeech2-conformer"
    assert omni_tts("fastspeech2-hifigan").spec.name == "fastspeech2-conformer"
    assert omni_tts("csm").spec.name == "csm"


def test_tts_vits_matches_transformers(omni_tts, tiny_tts) -> None:
    from transformers import AutoTokenizer, VitsModel

    path = tiny_tts("vits")
    tok, model = AutoTokenizer.from_pretrained(path), VitsModel.from_pretrained(path).eval()
    text = "hello world, this is omni"
    ours = omni_tts("vits").generate(text, seed=7, split_sentences=False)
    torch.manual_seed(7)
    with torch.no_grad():
        ref = _np(model(**tok(text, return_tensors="pt")).waveform)
    assert ours.sample_rate == 16000
    np.testing.assert_array_equal(ours.audio, ref)
    # Sentence streaming: segment i is transformers' output for that sentence with seed + i.
    text = "first sentence here. and the second one! a third?"
    ours = omni_tts("vits").generate(text, seed=7)
    refs = []
    for i, sentence in enumerate(split_sentences(text)):
        torch.manual_seed(7 + i)
        with torch.no_grad():
            refs.append(_np(model(**tok(sentence, return_tensors="pt")).waveform))
    np.testing.assert_array_equal(ours.audio, np.concatenate(refs))
    # Native speed: transformers' speaking_rate (duration scaling, no pitch change).
    fast = omni_tts("vits").generate("hello world", seed=1, speed=2.0)
    torch.manual_seed(1)
    model.speaking_rate = 2.0  # the attribute both transformers 4.x and 5.x honour
    with torch.no_grad():
        ref = _np(model(**tok("hello world", return_tensors="pt")).waveform)
    np.testing.assert_array_equal(fast.audio, ref)


def test_tts_vits_speakers_match_transformers(omni_tts, tiny_tts) -> None:
    from transformers import AutoTokenizer, VitsModel

    path = tiny_tts("vits-multi")
    omni = omni_tts("vits-multi")
    assert [v.id for v in omni.pipeline.voices()] == ["speaker-0", "speaker-1", "speaker-2"]
    tok, model = AutoTokenizer.from_pretrained(path), VitsModel.from_pretrained(path).eval()
    outs = {}
    for i in range(3):
        ours = omni.generate("good morning", seed=3, voice=f"speaker-{i}")
        torch.manual_seed(3)
        with torch.no_grad():
            ref = model(**tok("good morning", return_tensors="pt"), speaker_id=i).waveform
        np.testing.assert_array_equal(ours.audio, _np(ref))
        outs[i] = ours.audio
    assert not np.array_equal(outs[0][: len(outs[1])], outs[1][: len(outs[0])])


def test_tts_speecht5_matches_transformers(omni_tts, tiny_tts) -> None:
    from transformers import AutoTokenizer, SpeechT5ForTextToSpeech, SpeechT5HifiGan

    from omni_tts.speecht5 import builtin_embedding

    path = tiny_tts("speecht5")
    tok = AutoTokenizer.from_pretrained(path)
    model = SpeechT5ForTextToSpeech.from_pretrained(path).eval()
    vocoder = SpeechT5HifiGan.from_pretrained(path / "vocoder").eval()
    omni = omni_tts("speecht5")
    assert [v.id for v in omni.pipeline.voices()][:4] == [f"builtin-{i}" for i in range(4)]
    for voice, index in (("builtin-0", 0), ("builtin-2", 2)):
        ours = omni.generate(
            "speak this text", seed=11, voice=voice, split_sentences=False, maxlenratio=2.0
        )
        torch.manual_seed(11)
        with torch.no_grad():
            ref = model.generate_speech(
                tok("speak this text", return_tensors="pt")["input_ids"],
                builtin_embedding(index, 16)[None],
                maxlenratio=2.0,
                vocoder=vocoder,
            )
        assert ours.sample_rate == 16000 and len(ours.audio) > 200
        np.testing.assert_array_equal(ours.audio, _np(ref))


def test_tts_speecht5_builtin_voices_are_deterministic() -> None:
    from omni_tts.speecht5 import builtin_embedding

    a, b = builtin_embedding(1, 512), builtin_embedding(1, 512)
    assert torch.equal(a, b) and abs(float(a.norm()) - 1.0) < 1e-5
    assert not torch.equal(builtin_embedding(0, 512), a)


def test_tts_speecht5_voices_from_files(tiny_tts, tmp_path) -> None:
    import shutil

    from omni_core import Omni

    path = tmp_path / "t5"
    shutil.copytree(tiny_tts("speecht5"), path)
    (path / "speaker_embeddings").mkdir()
    vec = np.linspace(-1, 1, 16, dtype=np.float32)
    np.save(path / "speaker_embeddings" / "alice.npy", vec)
    omni = Omni(path)
    assert "alice" in [v.id for v in omni.pipeline.voices()]
    assert len(omni.generate("hi there", seed=0, voice="alice", maxlenratio=1.0).audio) > 0


@pytest.mark.parametrize("family", ["fastspeech2", "fastspeech2-hifigan"])
def test_tts_fastspeech2_matches_transformers(omni_tts, tiny_tts, family) -> None:
    from transformers import (
        AutoTokenizer,
        FastSpeech2ConformerHifiGan,
        FastSpeech2ConformerModel,
        FastSpeech2ConformerWithHifiGan,
    )

    path = tiny_tts(family)
    tok = AutoTokenizer.from_pretrained(path)
    text = "the model is deterministic"
    inputs = tok(text, return_tensors="pt")
    with torch.no_grad():
        if family == "fastspeech2":
            model = FastSpeech2ConformerModel.from_pretrained(path).eval()
            vocoder = FastSpeech2ConformerHifiGan.from_pretrained(path / "vocoder").eval()
            ref = vocoder(model(**inputs, return_dict=True).spectrogram)
        else:
            model = FastSpeech2ConformerWithHifiGan.from_pretrained(path).eval()
            ref = model(**inputs, return_dict=True).waveform
    ours = omni_tts(family).generate(text, split_sentences=False)
    assert ours.sample_rate == 22050 and len(ours.audio) > 1000
    np.testing.assert_array_equal(ours.audio, _np(ref))


def test_tts_csm_matches_transformers(omni_tts, tiny_tts) -> None:
    from transformers import AutoProcessor, CsmForConditionalGeneration

    path = tiny_tts("csm")
    processor = AutoProcessor.from_pretrained(path)
    model = CsmForConditionalGeneration.from_pretrained(path).eval()
    omni = omni_tts("csm")
    for voice, speaker in (("speaker-0", 0), ("speaker-2", 2)):
        text = "hello from the codec model"
        chunks = list(omni.stream(text, seed=5, voice=voice, max_new_tokens=20))
        torch.manual_seed(5)
        with torch.no_grad():
            inputs = processor(f"[{speaker}]{text}", add_special_tokens=True)
            ref = model.generate(**inputs, output_audio=True, max_new_tokens=20)[0]
        ours = np.concatenate([c.samples for c in chunks])
        with torch.no_grad():  # samples per Mimi frame, as this transformers version decodes
            hop = model.codec_model.decode(torch.ones(1, 4, 1, dtype=torch.long)).audio_values
        hop = hop.shape[-1]
        assert ours.shape == (ref.shape[0],) and ours.shape[0] % hop == 0
        # Chunked Mimi decoding with its attention window as context == whole decoding.
        np.testing.assert_allclose(ours, _np(ref), atol=2e-5, rtol=0)
        # It really streamed: 2 frames first, then 6-frame chunks, while generating.
        assert [len(c.samples) // hop for c in chunks][:2] == [2, 6]
