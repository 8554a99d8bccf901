"""Qwen2.5-Omni's token2wav DiT replayed as graphs (``cuda_graphs``), its capture path emulated
on CPU: a streamed answer's audio equals the eager forward's sample for sample, the recurring
chunk shape is captured once and replayed, the shapes used last are kept (an LRU), the forward
is swapped only during omni's decode, and the option is checked."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omni_core import ConfigError, Omni
from omni_core.chat import ChatMessage

FIELDS = {"max_tokens": 10, "temperature": 0, "modalities": ("text", "audio"), "seed": 0}
LOAD = {"talker_max_frames": 30, "talker_sample": "off", "audio_chunk_frames": 6}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from omni_qwen.testing import build_tiny_qwen25_omni

    return build_tiny_qwen25_omni(tmp_path_factory.mktemp("qwen25-graphs") / "tiny")


def _answer(omni: Omni) -> np.ndarray:
    pipeline = omni.pipeline
    messages = [ChatMessage.text("user", "say something")]
    request = pipeline.validate(omni.request(messages=messages, stream=True, **FIELDS))
    pieces = [d.audio.samples for d in pipeline.open(request) if d.audio is not None]
    assert len(pieces) >= 3  # several chunks: the standard chunk shape recurs
    return np.concatenate(pieces)


def test_graphed_dit_audio_equals_the_eager_forward(checkpoint: Any, emulate_capture: Any) -> None:
    eager = _answer(Omni(checkpoint, device="cpu", cuda_graphs="off", **LOAD))
    omni = Omni(checkpoint, device="cpu", **LOAD)
    codec = omni.pipeline.shared_runtime().speech_chain.stages.codec
    emulate_capture(codec.graphs.runner)
    dit = codec.token2wav.code2wav_dit_model
    assert "forward" not in vars(dit)
    graphed = _answer(omni)
    assert "forward" not in vars(dit)  # swapped in for omni's decode only
    np.testing.assert_array_equal(graphed, eager)
    report = codec.graphs.report()
    assert report["path"] == "cuda-graphs" and report["replays"] > 0
    # one graph per shape that came twice, not one per chunk or per ODE evaluation
    assert 1 <= report["captured"] <= 3 < report["replays"]
    assert report["eager_calls"] == 0  # the runner ran nothing eagerly: first sightings did


def test_graphed_dit_keeps_the_shapes_used_last(checkpoint: Any, emulate_capture: Any) -> None:
    """With room for one graph, every new shape evicts the one used longest ago (captured again
    when it comes back): the audio is still the eager forward's, and one graph is kept."""
    eager = _answer(Omni(checkpoint, device="cpu", cuda_graphs="off", **LOAD))
    omni = Omni(checkpoint, device="cpu", **LOAD)
    codec = omni.pipeline.shared_runtime().speech_chain.stages.codec
    emulate_capture(codec.graphs.runner)
    codec.graphs.MAX_GRAPHS = 1
    np.testing.assert_array_equal(_answer(omni), eager)
    report = codec.graphs.report()
    assert report["captured"] >= 2 and len(report["graphs"]) == 1


def test_a_call_the_wrapper_does_not_know_goes_to_the_eager_forward(checkpoint: Any) -> None:
    """Keyword inputs are taken like positional ones; an unknown keyword reaches transformers'
    forward with every argument intact (here it refuses nothing: **kwargs)."""
    import torch

    from omni_qwen.omni.qwen25_dit_graphs import GraphedDiT

    calls: list[tuple[tuple, dict]] = []

    def eager(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return torch.zeros(1)

    dit = Omni(checkpoint, device="cpu", **LOAD).pipeline.model.token2wav.code2wav_dit_model
    graphed = GraphedDiT(dit, capture=False)
    inputs = {"hidden_states": torch.zeros(1, 2, 3), "condition_vector": torch.zeros(1, 2, 3)}
    graphed._forward(eager, **inputs, unknown=1)
    assert set(calls[-1][1]) >= {"hidden_states", "condition_vector", "unknown", "apply_cfg"}


def test_cuda_graphs_option_is_checked(checkpoint: Any) -> None:
    with pytest.raises(ConfigError, match="cuda_graphs"):
        Omni(checkpoint, device="cpu", cuda_graphs="sometimes")
