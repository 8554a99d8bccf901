"""Qwen3-Omni's code predictor loop at static shapes (``decode_graphs``): the static loop run
uncaptured (``static``) and with the capture path emulated on the CPU (every replay reruns the
step into the captured outputs) gives the eager stage's codes and audio, for greedy and
seeded sampled answers, alone and batched in one runtime; the option is checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from omni_core import ConfigError, GenerationRequest
from omni_core.chat import ChatMessage
from omni_core.testing import emulate_graph_capture

PROMPTS = ["hello world", "the world, hello", "you the world"]


def _options(**extra: Any) -> Any:
    from omni_core.testing import pipeline_options

    return pipeline_options(dtype=torch.float32, first_chunk_frames=2, chunk_frames=3, **extra)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_qwen.testing import build_tiny_qwen3_omni

    torch.set_num_threads(2)
    return build_tiny_qwen3_omni(tmp_path_factory.mktemp("qwen3-omni-graphs") / "tiny")


def _pipe(checkpoint: Path, mode: str) -> Any:
    from omni_qwen.omni.qwen3_pipeline import Qwen3OmniPipeline

    return Qwen3OmniPipeline.from_pretrained(checkpoint, _options(decode_graphs=mode))


def _requests(pipe: Any) -> list[Any]:
    asks = [
        {"temperature": 0.0},
        {"temperature": 0.8, "seed": 7},  # the code predictor samples with the request's seed
        {"temperature": 0.9, "seed": 3},
    ]
    return [
        pipe.validate(
            GenerationRequest(
                messages=[ChatMessage.text("user", p)],
                modalities=("text", "audio"),
                max_tokens=12,
                stream=True,
                **a,
            )
        )
        for p, a in zip(PROMPTS, asks, strict=True)
    ]


def _together(pipe: Any) -> list[tuple[list[int], torch.Tensor, np.ndarray]]:
    runtime = pipe.shared_runtime()
    streams = [pipe.open(r) for r in _requests(pipe)]
    deltas: list[list[Any]] = [[] for _ in streams]
    while not all(s.done for s in streams):
        runtime.step()
        for mine, stream in zip(deltas, streams, strict=True):
            mine.extend(stream.poll())
    out = []
    for mine, stream in zip(deltas, streams, strict=True):
        assert stream.error is None
        pieces = [d.audio.samples for d in mine if d.audio is not None]
        out.append((list(stream.ids), stream.speech.all_codes(), np.concatenate(pieces)))
    return out


@pytest.fixture(scope="module")
def eager(checkpoint: Path) -> list[tuple[list[int], torch.Tensor, np.ndarray]]:
    return _together(_pipe(checkpoint, "off"))


@pytest.mark.parametrize("capture", ["static", "emulated"])
def test_the_static_loop_gives_the_eager_stages_codes_and_audio(
    checkpoint: Path, eager: Any, capture: str
) -> None:
    from omni_qwen.omni.qwen3_graphs import GraphCodePredictorStage

    pipe = _pipe(checkpoint, "static")
    runtime = pipe.shared_runtime()  # built now: the speech chain and its stages
    stage = runtime.speech_chain.stages.frame_stages[0]
    assert isinstance(stage, GraphCodePredictorStage)
    if capture == "emulated":
        emulate_graph_capture(stage.runner)
    got = _together(pipe)
    for (ids, codes, audio), (want_ids, want_codes, want_audio) in zip(got, eager, strict=True):
        assert ids == want_ids
        assert codes.shape == want_codes.shape and codes.shape[-1] > 4
        assert torch.equal(codes, want_codes)
        np.testing.assert_allclose(audio, want_audio, atol=1e-5, rtol=0)
    report = stage.report()
    if capture == "emulated":
        assert report["path"] == "cuda-graphs"
        assert report["captured"] >= 2 and report["replays"] > 0  # greedy and sampled buckets
    else:
        assert report["path"] != "cuda-graphs"


def test_the_option_is_checked_and_is_eager_off_cuda(checkpoint: Path) -> None:
    from omni_qwen.omni.qwen3_talker import CodePredictorStage

    with pytest.raises(ConfigError, match="decode_graphs"):
        _pipe(checkpoint, "sometimes")
    pipe = _pipe(checkpoint, "on")  # CPU: the eager stage
    stage = pipe.shared_runtime().speech_chain.stages.frame_stages[0]
    assert type(stage) is CodePredictorStage
