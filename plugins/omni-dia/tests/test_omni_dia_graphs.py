"""Dia's static-shape decode step (``cuda_graphs``; on the CPU it runs without capture, or with
the capture path emulated): greedy codes and waveforms equal ``generate()``'s and the eager
stage's, alone and batched, streamed, with a voice prompt, with requests joining and leaving
between steps, across key and text buckets; the load option is checked and the path reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from omni_core import ConfigError, Omni
from omni_core.speech import ReferenceVoice
from omni_core.testing import emulate_graph_capture, run_queued_together

from omni_dia.testing import reference_generate

TEXTS = ["[S1] Hello there.", "[S1] Hello there. [S2] Hi!", "[S2] A longer sentence, to speak."]
PROMPT = (np.random.default_rng(0).standard_normal(882) * 0.1).astype(np.float32)
TRANSCRIPT = "[S1] Some words."
ATOL = 1e-4


@pytest.fixture(scope="module")
def static(checkpoint: Path) -> Omni:
    return Omni(checkpoint, device="cpu", cuda_graphs="static")


def _speech(omni: Omni, **fields: Any) -> tuple[torch.Tensor, np.ndarray]:
    stream = omni.pipeline.open(omni.request(**fields))
    chunks = [c.samples for c in stream]
    audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    return stream.all_codes().long(), audio


def _interleaved(omni: Omni, requests: list[dict[str, Any]], join_every: int) -> list[Any]:
    """Open a request every ``join_every`` steps; step until every stream ends."""
    pipeline = omni.pipeline
    runtime = pipeline.shared_runtime()
    pending = [pipeline.validate(omni.request(**r)) for r in requests]
    streams: list[Any] = []
    step = 0
    while pending or not all(s.done for s in streams):
        if pending and step % join_every == 0:
            streams.append(pipeline.open(pending.pop(0)))
        runtime.step()
        step += 1
    for stream in streams:
        assert stream.error is None, stream.error
    return streams


def _voice() -> ReferenceVoice:
    return ReferenceVoice(audio=PROMPT, sample_rate=44100, transcript=TRANSCRIPT)


def test_static_step_greedy_equals_generate_alone_streamed_and_cloned(
    static: Omni, checkpoint: Path
) -> None:
    channels = static.pipeline.model.config.decoder_config.num_channels
    for text in TEXTS:
        frames, expected = reference_generate(checkpoint, text)
        codes, audio = _speech(static, prompt=text, temperature=0)
        assert torch.equal(codes[:channels], frames.long()), text
        np.testing.assert_allclose(audio, expected.numpy(), atol=ATOL)
    _, expected = reference_generate(checkpoint, TEXTS[0])
    _, audio = _speech(static, prompt=TEXTS[0], temperature=0, stream=True)
    np.testing.assert_allclose(audio, expected.numpy(), atol=1e-5)
    text = "[S2] Hello there."
    frames, expected = reference_generate(checkpoint, f"{TRANSCRIPT} {text}", audio=PROMPT)
    codes, audio = _speech(static, prompt=text, temperature=0, reference=_voice())
    assert torch.equal(codes[:channels], frames.long())
    np.testing.assert_allclose(audio, expected.numpy(), atol=ATOL)
    report = static.pipeline.decode_report()
    assert report["cuda_graphs"] == "static" and report["path"] == "static"
    assert report["decoder"]["eager_calls"] > 0 and report["decoder"]["replays"] == 0


def test_static_step_batched_equals_the_eager_stage(static: Omni, omni: Omni) -> None:
    """Requests of different texts and prompts (one cloned, one sampled and streamed) share
    static steps; each equals the eager stage's answer (the session's default load, eager on
    the CPU)."""
    asks: list[dict[str, Any]] = [
        {"prompt": TEXTS[0], "temperature": 0},
        {"prompt": "[S2] Hello there.", "temperature": 0, "reference": _voice()},
        {"prompt": TEXTS[2], "seed": 4, "stream": True},
    ]
    assert omni.pipeline.decode_report()["cuda_graphs"] == "on"
    eager = run_queued_together(omni, asks, name="dia")
    assert omni.pipeline.decode_report()["path"] == "eager"
    got = run_queued_together(static, asks, name="dia")
    for mine, theirs in zip(got, eager, strict=True):
        assert mine.audio.size > 0
        np.testing.assert_allclose(mine.audio, theirs.audio, atol=ATOL)


def test_joins_and_leaves_across_buckets_equal_the_eager_stage(
    checkpoint: Path, omni: Omni, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests join every 3 steps and end at their own lengths (slots freed in the middle and
    taken again, batches padded to buckets 1, 2, 4); keys cross buckets of 32 and a long text
    grows the cross-attention storage mid-flight: the codes equal the eager stage's."""
    from omni_core.runtime import bucket_for

    from omni_dia import graphs

    monkeypatch.setattr(graphs, "key_bucket", lambda n: bucket_for(n, (32,)))
    monkeypatch.setattr(graphs, "RESERVED_KEYS", 32)
    mine = Omni(checkpoint, device="cpu", cuda_graphs="static")
    long_text = "[S1] " + "A sentence that goes on and on. " * 6
    requests: list[dict[str, Any]] = [
        {"prompt": TEXTS[2], "temperature": 0, "max_new_tokens": 70},
        {"prompt": TEXTS[0], "temperature": 0, "max_new_tokens": 20},
        {"prompt": TEXTS[1], "seed": 3, "max_new_tokens": 40},
        {"prompt": long_text, "temperature": 0, "max_new_tokens": 30},
        {"prompt": TEXTS[0], "temperature": 0, "reference": _voice(), "max_new_tokens": 30},
    ]
    assert len(long_text.encode()) > graphs.TEXT_BUCKETS[0]
    decoder = mine.pipeline.shared_runtime().stages.decoder
    ran: list[Any] = []
    run = decoder.runner.run
    monkeypatch.setattr(decoder.runner, "run", lambda key, fn: ran.append(key) or run(key, fn))
    got = [s.all_codes() for s in _interleaved(mine, requests, join_every=3)]
    want = [s.all_codes() for s in _interleaved(omni, requests, join_every=3)]
    for a, b in zip(got, want, strict=True):
        assert a.shape[1] > 0 and torch.equal(a, b)
    assert len({key[1] for key in ran}) >= 3  # key buckets crossed (of 32, doubling)
    assert {key[2] for key in ran} == set(graphs.TEXT_BUCKETS[:2])  # the long text grew it
    assert {key[0] for key in ran} >= {1, 2, 4} and {key[3] for key in ran} == {False, True}


def test_the_capture_path_emulated_on_cpu_gives_generates_codes(checkpoint: Path) -> None:
    """Every batch bucket captured at the first decode (on the current inputs, warm-up calls
    repeated), replays overwriting their outputs: codes still equal generate()'s, alone and
    batched."""
    from omni_core.runtime import batch_buckets

    omni = Omni(checkpoint, device="cpu", cuda_graphs="static")
    runner = omni.pipeline.shared_runtime().stages.decoder.runner
    emulate_graph_capture(runner)
    channels = omni.pipeline.model.config.decoder_config.num_channels
    asks = [{"prompt": text, "temperature": 0} for text in TEXTS]
    results = run_queued_together(omni, asks, name="dia")
    for text, result in zip(TEXTS, results, strict=True):
        frames, expected = reference_generate(checkpoint, text)
        np.testing.assert_allclose(result.audio, expected.numpy(), atol=ATOL)
        codes, _ = _speech(omni, prompt=text, temperature=0)
        assert torch.equal(codes[:channels], frames.long())
    report = omni.pipeline.decode_report()
    assert report["path"] == "cuda-graphs"
    decoder = report["decoder"]
    assert decoder["captured"] >= 2 * len(batch_buckets(omni.pipeline.max_concurrency))
    assert decoder["replays"] > 0 and decoder["eager_calls"] == 0


def test_the_option_is_checked_and_is_eager_off_cuda(checkpoint: Path, omni: Omni) -> None:
    with pytest.raises(ConfigError, match="cuda_graphs"):
        Omni(checkpoint, device="cpu", cuda_graphs="sometimes")
    off = Omni(checkpoint, device="cpu", cuda_graphs="off")
    assert off.pipeline.decode_report() == {
        "cuda_graphs": "off",
        "path": "not built yet",
        "decoder": None,
    }
    omni.pipeline.shared_runtime()
    assert omni.pipeline.decode_report() == {"cuda_graphs": "on", "path": "eager", "decoder": None}
