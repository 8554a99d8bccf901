"""The staged runtime: batching by key, progress, cancellation between steps, timings."""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path

import pytest
import torch

from omni_core.contract.pipeline import DenoiseState, PipelineOptions, StagedPipeline
from omni_core.contract.types import GenerationRequest, GenerationResult
from omni_core.runtime.staged import Cancelled, run_to_completion


class Counter(StagedPipeline):
    """A toy pipeline: the latent is a tensor that each step scales; records step batches."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> Counter:
        return cls()

    def prepare(self, request: GenerationRequest) -> DenoiseState:
        steps = request.num_inference_steps or 3
        size = request.height or 4
        return DenoiseState(request=request, num_steps=steps, data={"x": torch.ones(size)})

    def batch_key(self, state: DenoiseState) -> Hashable:
        return (state.data["x"].shape, state.step_index, state.num_steps)

    def step(self, states: list[DenoiseState]) -> None:
        self.batches.append([s.request.prompt for s in states])
        x = torch.stack([s.data["x"] for s in states]) * 2
        for state, row in zip(states, x, strict=True):
            state.data["x"] = row
            state.step_index += 1

    def decode(self, state: DenoiseState) -> GenerationResult:
        return GenerationResult(info={"x": state.data["x"]})


def test_runtime_batches_compatible_states() -> None:
    pipe = Counter()
    requests = [
        GenerationRequest(prompt="a", num_inference_steps=2),
        GenerationRequest(prompt="b", num_inference_steps=2),
        GenerationRequest(prompt="c", num_inference_steps=2, height=8),
    ]
    results = run_to_completion(pipe, requests)
    assert pipe.batches == [["a", "b"], ["c"], ["a", "b"], ["c"]]
    assert [float(r.info["x"][0]) for r in results] == [4.0, 4.0, 4.0]
    for result in results:
        assert {"prepare_s", "denoise_s", "decode_s", "steps"} <= set(result.timings)


def test_runtime_respects_max_batch() -> None:
    pipe = Counter()
    requests = [GenerationRequest(prompt=p, num_inference_steps=1) for p in "abcde"]
    run_to_completion(pipe, requests, max_batch=2)
    assert pipe.batches == [["a", "b"], ["c", "d"], ["e"]]


def test_runtime_progress_and_cancellation() -> None:
    pipe = Counter()
    seen: list[tuple[str, int, int]] = []
    request = GenerationRequest(prompt="a", num_inference_steps=3, request_id="r1")
    run_to_completion(pipe, [request], progress=lambda *a: seen.append(a))
    assert seen == [("r1", 1, 3), ("r1", 2, 3), ("r1", 3, 3)]

    with pytest.raises(Cancelled, match="r1"):
        run_to_completion(pipe, [request], should_cancel=lambda rid: len(pipe.batches) >= 4)
    assert len(pipe.batches) == 4  # stopped right after the step that asked


def test_runtime_unknown_checkpoint_lists_installed_pipelines(tmp_path: Path) -> None:
    from omni_core import Omni
    from omni_core.contract.errors import ModelNotFoundError

    (tmp_path / "config.json").write_text('{"architectures": ["NoSuchModelForThings"]}')
    with pytest.raises(ModelNotFoundError, match="no installed pipeline serves NoSuchModel") as e:
        Omni(tmp_path)
    assert "installed pipelines:" in str(e.value)
    with pytest.raises(ModelNotFoundError, match="unknown pipeline 'nope'"):
        Omni(tmp_path, pipeline="nope")
    with pytest.raises(ModelNotFoundError, match="not a Hub id"):
        Omni(tmp_path / "missing" / "deeper")


def test_runtime_request_rejects_bad_fields() -> None:
    from omni_core.api import Omni
    from omni_core.contract.errors import InvalidRequestError

    omni = Omni.__new__(Omni)
    omni.pipeline = Counter()
    with pytest.raises(InvalidRequestError, match="num_inference_steps") as e:
        omni.request("a", num_inference_steps=0)
    assert e.value.param == "num_inference_steps"
    with pytest.raises(InvalidRequestError, match=r"extras\.foo"):
        omni.request("a", foo=1)  # Counter takes no extras
