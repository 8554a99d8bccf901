"""Qwen3-TTS served by omni's autoregressive runtime: batched greedy codes equal the plain
one-request loop (``reference_generate``), for the three kinds, with requests joining and leaving
between steps; the request checks (speakers, instructions, language, cloning) say 400, never
ignore; ``Omni(...).stream`` yields deltas that make the whole output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from omni_core import InvalidRequestError, Omni
from omni_core.speech import ReferenceVoice

GREEDY = {"temperature": 0, "max_new_tokens": 30}
TEXTS = ["Hello there, how are you?", "A second and longer sentence to speak today.", "Hi!"]


@pytest.fixture(scope="module")
def tts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Omni]:
    from omni_qwen.testing import build_tiny_qwen3_tts

    root = tmp_path_factory.mktemp("qwen3-tts")
    loaded = {}
    for kind, size in (
        ("custom_voice", "1b7"),
        ("voice_design", "1b7"),
        ("base", "1b7"),
        ("custom_voice", "0b6"),
    ):
        path = build_tiny_qwen3_tts(root / f"{kind}-{size}", kind, size=size)
        loaded[f"{kind}-{size}"] = Omni(path, device="cpu")
    return loaded


def _run_interleaved(omni: Omni, requests: list[dict]) -> list:
    """Open one request per step (they join at different steps) and step until all end."""
    pipeline = omni.pipeline
    runtime = pipeline.shared_runtime()
    pending = [pipeline.validate(omni.request(**r)) for r in requests]
    streams, widths = [], []
    while pending or not all(s.done for s in streams):
        if pending:
            streams.append(pipeline.open(pending.pop(0)))
        widths.append(runtime.open_streams)
        runtime.step()
    assert max(widths) >= 2
    for stream in streams:
        assert stream.error is None, stream.error
    return streams


def test_custom_voice_batched_codes_equal_reference(tts) -> None:
    from omni_qwen.tts import reference_generate

    omni = tts["custom_voice-1b7"]
    speakers = omni.pipeline.model.speakers
    assert [v.id for v in omni.pipeline.voices()] == speakers
    requests = [
        {"prompt": TEXTS[0], "voice": speakers[0], **GREEDY},
        {"prompt": TEXTS[1], "voice": speakers[1], "instructions": "cheerful", **GREEDY},
        {"prompt": TEXTS[2], "voice": speakers[2], "language": "english", **GREEDY},
    ]
    streams = _run_interleaved(omni, requests)
    for request, stream in zip(requests, streams, strict=True):
        ref = reference_generate(
            omni.pipeline.model,
            request["prompt"],
            speaker=request["voice"],
            language=request.get("language", "auto"),
            instructions=request.get("instructions"),
            max_new_tokens=GREEDY["max_new_tokens"],
        )
        assert torch.equal(stream.all_codes().cpu(), ref.codes)
        audio = np.concatenate([c.samples for c in stream.poll()])
        np.testing.assert_allclose(audio, ref.wav, atol=1e-4)


def test_voice_design_and_base_clone_equal_reference(tts) -> None:
    from omni_qwen.tts import reference_generate

    design = tts["voice_design-1b7"]
    requests = [{"prompt": t, "instructions": f"voice {i}", **GREEDY} for i, t in enumerate(TEXTS)]
    for request, stream in zip(requests, _run_interleaved(design, requests), strict=True):
        ref = reference_generate(
            design.pipeline.model,
            request["prompt"],
            instructions=request["instructions"],
            max_new_tokens=30,
        )
        assert torch.equal(stream.all_codes().cpu(), ref.codes)

    base = tts["base-1b7"]
    wav = (0.3 * np.sin(np.linspace(0, 400, 24000))).astype(np.float32)
    reference = ReferenceVoice(audio=wav, sample_rate=24000, transcript="a reference")
    prepared = base.pipeline.prepare_voice(reference)
    voice = base.pipeline.model.prepare_voice(wav, 24000, "a reference")
    requests = [
        {"prompt": TEXTS[0], "reference": reference, **GREEDY},
        {"prompt": TEXTS[1], "reference": ReferenceVoice(prepared=prepared, name="v"), **GREEDY},
    ]
    for request, stream in zip(requests, _run_interleaved(base, requests), strict=True):
        ref = reference_generate(
            base.pipeline.model, request["prompt"], voice=voice, max_new_tokens=30
        )
        assert torch.equal(stream.all_codes().cpu(), ref.codes)
    # x-vector-only: the speaker embedding alone
    xvec = base.generate(TEXTS[2], reference=reference, x_vector_only_mode=True, **GREEDY)
    ref = reference_generate(
        base.pipeline.model,
        TEXTS[2],
        max_new_tokens=30,
        voice=base.pipeline.model.prepare_voice(wav, 24000, x_vector_only=True),
    )
    assert len(xvec.audio) == ref.codes.shape[1] * 1920


@pytest.mark.parametrize(
    ("key", "fields", "param"),
    [
        ("custom_voice-1b7", {"voice": "nobody"}, "voice"),
        ("custom_voice-1b7", {"language": "klingon"}, "language"),
        ("custom_voice-1b7", {"task_type": "Base"}, "task_type"),
        ("custom_voice-0b6", {"instructions": "whisper"}, "instructions"),
        ("voice_design-1b7", {}, "instructions"),
        ("base-1b7", {}, "ref_audio"),
        (
            "custom_voice-1b7",
            {"reference": ReferenceVoice(audio=np.zeros(8), sample_rate=8000)},
            "ref_audio",
        ),
    ],
)
def test_requests_it_cannot_honour_are_refused(tts, key: str, fields: dict, param: str) -> None:
    omni = tts[key]
    with pytest.raises(InvalidRequestError) as info:
        omni.pipeline.validate(omni.request(TEXTS[0], **fields))
    assert info.value.param == param


def test_omni_stream_deltas_make_the_whole_output(tts) -> None:
    omni = tts["custom_voice-1b7"]
    assert omni.spec.name == "qwen3-tts"
    chunks = list(omni.stream(TEXTS[1], voice="serena", **GREEDY))
    whole = omni.generate(TEXTS[1], voice="serena", **GREEDY)
    assert len(chunks) >= 2 and all(c.sample_rate == 24000 for c in chunks)
    np.testing.assert_array_equal(np.concatenate([c.samples for c in chunks]), whole.audio)
    # the first chunk is small (first audio early): 2 frames of 1920 samples
    assert len(chunks[0].samples) == 2 * 1920
    resampled = omni.generate(TEXTS[2], voice="serena", sample_rate=16000, **GREEDY)
    assert resampled.sample_rate == 16000


def test_cli_generate_speech(tts, tmp_path: Path) -> None:
    from omni_core.testing import run_cli, write_audio

    def run(key: str, *args: str):
        model = str(tts[key].path)
        greedy = ["--extra", "temperature=0", "--extra", "max_new_tokens=12", "-q"]
        return run_cli("generate", "speech", "Hello there.", "--model", model, *greedy, *args)

    out = tmp_path / "styled.wav"
    result = run(
        "custom_voice-1b7",
        "--voice",
        "serena",
        "--instructions",
        "cheerful",
        "--language",
        "English",
        "-o",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"RIFF"
    refused = run(
        "custom_voice-0b6",
        "--voice",
        "serena",
        "--instructions",
        "whisper",
        "-o",
        str(tmp_path / "no.wav"),
    )
    assert refused.exit_code == 2 and "instructions" in refused.output
    assert not (tmp_path / "no.wav").exists()
    reference = tmp_path / "ref.wav"
    tone = (0.3 * np.sin(np.linspace(0, 900, 24000))).astype(np.float32)
    write_audio(reference, tone, 24000)
    cloned = run(
        "base-1b7",
        "--ref-audio",
        str(reference),
        "--ref-text",
        "a tone",
        "-o",
        str(tmp_path / "clone.flac"),
    )
    assert cloned.exit_code == 0, cloned.output
    assert (tmp_path / "clone.flac").read_bytes()[:4] == b"fLaC"
