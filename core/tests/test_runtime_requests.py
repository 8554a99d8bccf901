"""The one request path (omni_core.contract.requests): shared fields from the schema, one validate,
seconds at the pipeline's fps, operator limits, and the same rules for Omni.request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from omni_core.api import Omni
from omni_core.contract.errors import InvalidRequestError
from omni_core.contract.pipeline import DenoiseState, PipelineOptions, StagedPipeline
from omni_core.contract.requests import (
    SHARED_FIELDS,
    RequestLimits,
    build_request,
    clip_seconds,
    make_request,
    split_keywords,
)
from omni_core.contract.types import GenerationRequest, GenerationResult


class _Extras(BaseModel):
    model_config = ConfigDict(extra="forbid")
    fps: int | None = None


class _Video(StagedPipeline):
    """Counts validate calls; 4k+1 frames (as Wan); 12 fps unless the ``fps`` extra says."""

    extras_model = _Extras

    def __init__(self) -> None:
        self.validated: list[GenerationRequest] = []

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> _Video:
        return cls()

    def output_fps(self, request: GenerationRequest) -> int:
        return _Extras.model_validate(request.extras).fps or 12

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        self.validated.append(request)
        request = super().validate(request)
        frames = request.num_frames or 9
        if (frames - 1) % 4:
            raise InvalidRequestError(f"num_frames {frames} must be 4k+1", param="num_frames")
        return request.model_copy(update={"num_frames": frames, "num_inference_steps": 20})

    def prepare(self, request: GenerationRequest) -> DenoiseState:
        return DenoiseState(request=request, num_steps=1)

    def step(self, states: list[DenoiseState]) -> None:
        for state in states:
            state.step_index += 1

    def decode(self, state: DenoiseState) -> GenerationResult:
        return GenerationResult()


def test_runtime_shared_fields_are_the_schema() -> None:
    assert SHARED_FIELDS == set(GenerationRequest.model_fields) - {"extras", "request_id"}
    shared, extras = split_keywords({"seed": 1, "prompt": "x", "fps": 8, "extras": {"a": 1}})
    assert shared == {"seed": 1, "prompt": "x"} and extras == {"fps": 8, "a": 1}


def test_runtime_build_request_validates_once_with_its_id() -> None:
    pipe = _Video()
    request = build_request(pipe, {"prompt": "a", "seed": 3}, extras={"fps": 8}, request_id="r1")
    assert len(pipe.validated) == 1
    assert pipe.validated[0].request_id == "r1"  # set at construction, seen by validate
    assert (request.request_id, request.seed, request.num_frames) == ("r1", 3, 9)
    assert request.extras == {"fps": 8}


@pytest.mark.parametrize(
    ("fields", "extras", "param"),
    [
        ({"prompt": "a", "num_inference_steps": 0}, {}, "num_inference_steps"),
        ({"prompt": "a", "height": -1}, {}, "height"),
        ({"prompt": "a"}, {"nope": 1}, "nope"),
        ({"prompt": "a"}, {"seed": 1}, "extras.seed"),
        ({"prompt": "a", "num_frames": 6}, {}, "num_frames"),
    ],
)
def test_runtime_build_request_names_the_field(
    fields: dict[str, Any], extras: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidRequestError) as info:
        build_request(_Video(), fields, extras=extras)
    assert info.value.param == param
    assert param.split(".")[-1] in info.value.message


def test_runtime_extras_at_the_top_level_of_a_body() -> None:
    """For HTTP bodies, an extra named like a shared field is an unknown parameter."""
    with pytest.raises(InvalidRequestError) as info:
        make_request({"prompt": "a"}, extras={"height": 3}, extras_at=None)
    assert (info.value.param, info.value.code) == ("height", "unknown_parameter")


def test_runtime_seconds_become_frames_at_the_pipelines_fps() -> None:
    pipe = _Video()
    one = build_request(pipe, {"prompt": "a"}, seconds=1.0)
    assert one.num_frames == 13 and clip_seconds(pipe, one) == 1.0  # 12 fps
    fast = build_request(pipe, {"prompt": "a"}, extras={"fps": 24}, seconds=1.0)
    assert fast.num_frames == 25 and clip_seconds(pipe, fast) == 1.0
    same = build_request(pipe, {"prompt": "a", "num_frames": 13}, seconds=1.0)
    assert same.num_frames == 13
    with pytest.raises(InvalidRequestError, match="disagree") as info:
        build_request(pipe, {"prompt": "a", "num_frames": 9}, seconds=1.0)
    assert info.value.param == "seconds" and "num_frames" in info.value.message
    with pytest.raises(InvalidRequestError, match="4k") as info:
        build_request(pipe, {"prompt": "a"}, seconds=0.5)  # 7 frames: refused, named seconds
    assert info.value.param == "seconds"
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidRequestError) as info:
            build_request(pipe, {"prompt": "a"}, seconds=bad)
        assert info.value.param == "seconds"


def test_runtime_limits_after_the_pipelines_defaults() -> None:
    pipe = _Video()
    limits = RequestLimits(max_steps=10)
    with pytest.raises(InvalidRequestError, match="limit of 10") as info:
        build_request(pipe, {"prompt": "a"}, limits=limits)  # the default is 20 steps
    assert info.value.param == "num_inference_steps"
    with pytest.raises(InvalidRequestError) as info:
        build_request(pipe, {"prompt": "a"}, limits=RequestLimits(max_frames=5), seconds=1.0)
    assert info.value.param == "seconds" and "13 frames" in info.value.message
    with pytest.raises(InvalidRequestError) as info:
        build_request(
            pipe, {"prompt": "a", "width": 64, "height": 64}, limits=RequestLimits(max_pixels=100)
        )
    assert info.value.param == "size"


def test_runtime_omni_request_is_the_same_path() -> None:
    omni = Omni.__new__(Omni)
    omni.pipeline = _Video()
    request = omni.request("a cat", seed=1, fps=8, request_id="mine")
    assert (request.request_id, request.extras, request.num_frames) == ("mine", {"fps": 8}, 9)
    assert len(omni.pipeline.validated) == 1
    with pytest.raises(InvalidRequestError) as info:
        omni.request("a cat", extras={"prompt": "b"})
    assert info.value.param == "extras.prompt"
