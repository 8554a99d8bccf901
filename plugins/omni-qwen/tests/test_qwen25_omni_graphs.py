"""Qwen2.5-Omni's graphed decode steps (``decode_graphs``) against the eager stages on a tiny
random checkpoint: the static steps, with the capture path emulated on the CPU (warm-up calls
repeated, every batch bucket captured at the first decode on stale inputs, replays overwriting
their outputs), give the eager answers token for token and the same audio — greedy and seeded
sampling, thinker and talker, several answers batched, answers joining while others decode."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omni_core import ConfigError, Omni
from omni_core.chat import ChatMessage

FRAMES = 20


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from omni_qwen.testing import build_tiny_qwen25_omni

    return build_tiny_qwen25_omni(tmp_path_factory.mktemp("qwen25-omni-graphs") / "tiny")


def _omni(checkpoint: Any, **options: Any) -> Omni:
    return Omni(checkpoint, device="cpu", talker_max_frames=FRAMES, **options)


SPEECH = ("text", "audio")
CASES = [
    ("hello world, the sound", {"temperature": 0, "modalities": SPEECH, "seed": 0}),
    ("the sound of the world", {"temperature": 0.9, "top_p": 0.8, "seed": 5}),
    ("a world of sound", {"temperature": 0.7, "top_k": 20, "seed": 3, "modalities": SPEECH}),
    ("hello sound", {"temperature": 0, "max_tokens": 6, "modalities": SPEECH, "seed": 1}),
]


def _answers(omni: Omni, join_every: int) -> list[tuple[list[int], np.ndarray]]:
    """Every case through one runtime, a new answer joining every ``join_every`` steps."""
    pipeline = omni.pipeline
    runtime = pipeline.shared_runtime()
    pending = [
        pipeline.validate(
            omni.request(messages=[ChatMessage.text("user", text)], **{"max_tokens": 10, **f})
        )
        for text, f in CASES
    ]
    streams: list[Any] = []
    deltas: list[list[Any]] = []
    step = 0
    while pending or not all(s.done for s in streams):
        if pending and step % join_every == 0:
            streams.append(pipeline.open(pending.pop(0)))
            deltas.append([])
        runtime.step()
        step += 1
        for stream, mine in zip(streams, deltas, strict=True):
            mine.extend(stream.poll())
    out = []
    for stream, mine in zip(streams, deltas, strict=True):
        assert stream.error is None
        pieces = [d.audio.samples for d in mine if d.audio is not None]
        out.append((stream.ids, np.concatenate(pieces) if pieces else np.zeros(0, np.float32)))
    return out


@pytest.fixture(scope="module")
def eager(checkpoint: Any) -> list[tuple[list[int], np.ndarray]]:
    return _answers(_omni(checkpoint, decode_graphs="off"), join_every=1)


@pytest.mark.parametrize("join_every", [1, 3])
def test_graphed_steps_give_the_eager_answers(
    checkpoint: Any, eager: list, emulate_capture: Any, join_every: int
) -> None:
    omni = _omni(checkpoint, decode_graphs="static")
    runtime = omni.pipeline.shared_runtime()
    thinker = runtime.stages.decoder
    talker = runtime.speech_chain.stages.decoder
    for stage in (thinker, talker):
        emulate_capture(stage.steps.runner)
    got = _answers(omni, join_every)
    for (ids, audio), (want_ids, want_audio) in zip(got, eager, strict=True):
        assert ids == want_ids
        assert audio.shape == want_audio.shape
        np.testing.assert_allclose(audio, want_audio, atol=1e-5)
    assert any(a.size for _, a in got) and any(not a.size for _, a in got)
    for stage in (thinker, talker):
        report = stage.report()
        # every batch bucket up to the runtime's slots, greedy and sampled, at the first decode
        assert report["captured"] >= 2 and report["replays"] > 0
        assert report["eager_calls"] == 0


def test_decode_graphs_option(checkpoint: Any) -> None:
    with pytest.raises(ConfigError, match="decode_graphs"):
        _omni(checkpoint, decode_graphs="sometimes")
    # "on" captures on CUDA only: on the CPU it is the eager stages
    runtime = _omni(checkpoint, decode_graphs="on").pipeline.shared_runtime()
    assert type(runtime.stages.decoder).__name__ == "ThinkerStage"


def test_token2wav_matmul_and_gather_options(checkpoint: Any) -> None:
    """Bad values are a ConfigError; ``tf32`` sets CUDA's float32 matmul precision only while
    token2wav decodes (on the CPU it changes nothing: the audio equals fp32's)."""
    import torch

    with pytest.raises(ConfigError, match="token2wav_matmul"):
        _omni(checkpoint, token2wav_matmul="fp16")
    with pytest.raises(ConfigError, match="audio_gather_steps"):
        _omni(checkpoint, audio_gather_steps=0)
    codecs = {}
    for matmul in ("fp32", "tf32"):
        runtime = _omni(checkpoint, token2wav_matmul=matmul).pipeline.shared_runtime()
        codecs[matmul] = runtime.speech_chain.stages.codec
    assert codecs["tf32"].tf32 and not codecs["fp32"].tf32
    seen = []
    dit = codecs["tf32"].token2wav.code2wav_dit_model
    hook = dit.register_forward_pre_hook(
        lambda *_: seen.append(torch.backends.cuda.matmul.fp32_precision)
    )
    before = torch.backends.cuda.matmul.fp32_precision
    codes = torch.zeros(1, 3, 8, dtype=torch.long)
    try:
        tf32 = codecs["tf32"].decode(codes, 2)
    finally:
        hook.remove()
    assert set(seen) == {"tf32"} and torch.backends.cuda.matmul.fp32_precision == before
    np.testing.assert_array_equal(tf32.numpy(), codecs["fp32"].decode(codes, 2).numpy())
