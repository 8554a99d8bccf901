"""Qwen3-Omni's decode steps at static shapes (``decode_graphs``): the thinker's and the
talker's decode steps and the code predictor's frame loop, run uncaptured (``static``) and with
the capture path emulated on the CPU (every batch bucket captured at the first decode on stale
inputs, every replay rerunning the step into the captured outputs), give the eager stages'
tokens, codes and audio — greedy and seeded sampling (temperature, top-p), alone and batched in
one runtime with answers joining while others decode; the thinker's ``follow`` is the fed
token's input embedding; a capture switches the MoE experts to a capturable implementation; the
option is checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from omni_core import ConfigError, GenerationRequest
from omni_core.chat import ChatMessage
from omni_core.testing import emulate_graph_capture

SPEECH = ("text", "audio")
#: (prompt, sampling, modalities): the code predictor samples with the request's seed too.
CASES = [
    ("hello world", {"temperature": 0.0}, SPEECH),
    ("the world, hello", {"temperature": 0.8, "seed": 7}, SPEECH),
    ("you the world", {"temperature": 0.9, "top_p": 0.8, "seed": 3}, SPEECH),
    ("world, you hello", {"temperature": 0.7, "top_p": 0.9, "seed": 11}, ("text",)),
]
Answer = tuple[list[int], torch.Tensor | None, np.ndarray]


def _options(**extra: Any) -> Any:
    from omni_core.testing import pipeline_options

    return pipeline_options(dtype=torch.float32, first_chunk_frames=2, chunk_frames=3, **extra)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_qwen.testing import build_tiny_qwen3_omni

    torch.set_num_threads(2)
    return build_tiny_qwen3_omni(tmp_path_factory.mktemp("qwen3-omni-graphs") / "tiny")


def _pipe(checkpoint: Path, mode: str, **extra: Any) -> Any:
    from omni_qwen.omni.qwen3_pipeline import Qwen3OmniPipeline

    return Qwen3OmniPipeline.from_pretrained(checkpoint, _options(decode_graphs=mode, **extra))


def _request(pipe: Any, case: tuple) -> Any:
    prompt, sampling, modalities = case
    message = [ChatMessage.text("user", prompt)]
    return pipe.validate(
        GenerationRequest(
            messages=message, modalities=modalities, max_tokens=12, stream=True, **sampling
        )
    )


def _answers(pipe: Any, cases: list[tuple], join_every: int = 1) -> list[Answer]:
    """``cases`` through one runtime, a new answer joining every ``join_every`` steps."""
    runtime = pipe.shared_runtime()
    pending = [_request(pipe, c) for c in cases]
    streams: list[Any] = []
    deltas: list[list[Any]] = []
    step = 0
    while pending or not all(s.done for s in streams):
        if pending and step % join_every == 0:
            streams.append(pipe.open(pending.pop(0)))
            deltas.append([])
        runtime.step()
        step += 1
        for mine, stream in zip(deltas, streams, strict=True):
            mine.extend(stream.poll())
    out = []
    for mine, stream in zip(deltas, streams, strict=True):
        assert stream.error is None
        pieces = [d.audio.samples for d in mine if d.audio is not None]
        codes = stream.speech.all_codes() if pieces else None
        audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
        out.append((list(stream.ids), codes, audio))
    return out


def _assert_same(got: list[Answer], want: list[Answer]) -> None:
    for (ids, codes, audio), (want_ids, want_codes, want_audio) in zip(got, want, strict=True):
        assert ids == want_ids and len(ids) > 1
        if want_codes is None:
            assert codes is None and audio.size == 0
            continue
        assert codes is not None
        assert codes.shape == want_codes.shape and codes.shape[-1] > 4
        assert torch.equal(codes, want_codes)
        np.testing.assert_allclose(audio, want_audio, atol=1e-5, rtol=0)


def _check_follow(thinker: Any) -> list[int]:
    """Wrap the thinker's decode: its ``follow`` must be the fed tokens' input embeddings (what
    the eager stage returns). Returns the list of checked steps' row counts."""
    decode, checked = thinker.decode, []

    def wrapped(states: list[Any], last: Any, cache: Any) -> Any:
        out = decode(states, last, cache)
        fed = thinker.thinker.get_input_embeddings()(last.tokens.view(-1, 1))[:, 0]
        assert out.follow_lag == 1 and torch.equal(out.follow, fed)
        checked.append(len(states))
        return out

    thinker.decode = wrapped
    return checked


def _graphed(pipe: Any, emulated: bool) -> tuple[Any, ...]:
    """The runtime's graphed thinker, talker and code predictor (capture emulated if asked)."""
    from omni_qwen.omni.qwen3_graphs import GraphCodePredictorStage
    from omni_qwen.omni.qwen3_talker_graphs import GraphTalkerStage
    from omni_qwen.omni.qwen3_thinker_graphs import GraphThinkerStage

    runtime = pipe.shared_runtime()  # built now: the chains and their stages
    speech = runtime.speech_chain.stages
    thinker, talker, predictor = runtime.stages.decoder, speech.decoder, speech.frame_stages[0]
    assert isinstance(thinker, GraphThinkerStage)
    assert isinstance(talker, GraphTalkerStage)
    assert isinstance(predictor, GraphCodePredictorStage)
    if emulated:
        for runner in (thinker.steps.runner, talker.steps.runner, predictor.runner):
            emulate_graph_capture(runner)
    return thinker, talker, predictor


@pytest.fixture(scope="module")
def eager(checkpoint: Path) -> list[Answer]:
    return _answers(_pipe(checkpoint, "off"), CASES)


@pytest.mark.parametrize(("capture", "join_every"), [("static", 1), ("emulated", 2)])
def test_the_static_steps_give_the_eager_stages_tokens_codes_and_audio(
    checkpoint: Path, eager: list[Answer], capture: str, join_every: int
) -> None:
    pipe = _pipe(checkpoint, "static")
    stages = _graphed(pipe, capture == "emulated")
    thinker, talker = stages[0], stages[1]
    checked = _check_follow(thinker)
    _assert_same(_answers(pipe, CASES, join_every), eager)
    assert max(checked) == len(CASES) and min(checked) < len(CASES)  # batched, joined later
    for stage in stages:
        report = stage.report()
        if capture == "emulated":
            assert report["path"] == "cuda-graphs" and report["eager_calls"] == 0
            assert report["captured"] >= 2 and report["replays"] > 0  # greedy and sampled
        else:
            assert report["path"] != "cuda-graphs" and report["eager_calls"] > 0
    assert thinker.report()["experts"] == talker.report()["experts"] == "grouped_mm"


def test_an_answer_alone_is_its_batched_answer(checkpoint: Path, eager: list[Answer]) -> None:
    pipe = _pipe(checkpoint, "static")
    _graphed(pipe, emulated=True)
    for case, want in zip(CASES[2:], eager[2:], strict=True):  # sampled with top-p: speech, text
        _assert_same(_answers(pipe, [case]), [want])


def test_a_text_only_model_decodes_the_same_without_follow(checkpoint: Path) -> None:
    from omni_qwen.omni.qwen3_thinker_graphs import GraphThinkerStage

    text = [(p, s, ("text",)) for p, s, _ in CASES]
    want = _answers(_pipe(checkpoint, "off", audio_output="false"), text)
    pipe = _pipe(checkpoint, "static", audio_output="false")
    thinker = pipe.shared_runtime().stages.decoder
    assert isinstance(thinker, GraphThinkerStage) and not thinker.follow
    emulate_graph_capture(thinker.steps.runner)
    _assert_same(_answers(pipe, text, join_every=3), want)
    assert thinker.report()["replays"] > 0


def test_a_capture_switches_eager_experts_to_grouped_mm(checkpoint: Path) -> None:
    from omni_qwen.omni.static_steps import capturable_experts

    pipe = _pipe(checkpoint, "static", audio_output="false")
    lm = pipe.model.thinker.model.language_model
    lm.set_experts_implementation("eager")  # host reads in every layer: not capturable
    thinker = pipe.shared_runtime().stages.decoder
    emulate_graph_capture(thinker.steps.runner)
    ((ids, _, _),) = _answers(pipe, [("hello world", {"temperature": 0.0}, ("text",))])
    assert len(ids) > 1
    assert lm.config._experts_implementation == "grouped_mm"
    assert thinker.report()["experts"] == "grouped_mm"
    assert capturable_experts(lm, "thinker") == "grouped_mm"  # kept

    lm.set_experts_implementation("eager")

    def refuse(_: str) -> None:
        raise ValueError("no grouped_mm here")

    lm.set_experts_implementation = refuse
    with pytest.raises(ConfigError, match="decode_graphs=static or off"):
        capturable_experts(lm, "qwen3-omni thinker")


def test_the_option_is_checked_and_is_eager_off_cuda(checkpoint: Path) -> None:
    from omni_qwen.omni.qwen3_talker import CodePredictorStage, TalkerStage
    from omni_qwen.omni.qwen3_thinker import ThinkerStage

    with pytest.raises(ConfigError, match="decode_graphs"):
        _pipe(checkpoint, "sometimes")
    runtime = _pipe(checkpoint, "on").shared_runtime()  # CPU: the eager stages
    assert type(runtime.stages.decoder) is ThinkerStage
    assert type(runtime.speech_chain.stages.decoder) is TalkerStage
    assert type(runtime.speech_chain.stages.frame_stages[0]) is CodePredictorStage
