"""The core reads only the pipeline members the base classes declare.

Two checks. At run time: pipelines whose ``__getattribute__`` (and whose class's, for
classmethods) records every attribute read made from an ``omni_core`` module are driven
through the paths the core has (``Omni``, the request builder, the engine, the staged loop,
the speech CLI); every name read must be declared on :class:`Pipeline`,
:class:`StagedPipeline` or :class:`SpeechPipeline`. Statically: no ``getattr``/``hasattr``
probes of a pipeline object anywhere in core/src, and every ``<...>pipeline.<name>`` read there
names a declared member.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from omni_core import PipelineSpec, hookimpl
from omni_core.chat import AutoregressiveChatPipeline
from omni_core.contract.pipeline import StagedPipeline
from omni_core.speech.pipeline import SpeechPipeline, StreamingSpeechPipeline

SRC = Path(__file__).resolve().parents[1] / "src" / "omni_core"
#: Members the pipeline base classes declare (each extends Pipeline; chat models' too; a
#: StreamingSpeechPipeline's native ``sample_rate`` is read once its class is checked).
DECLARED = frozenset().union(
    *(
        dir(c)
        for c in (
            StagedPipeline,
            SpeechPipeline,
            StreamingSpeechPipeline,
            AutoregressiveChatPipeline,
        )
    )
)

RECORDER = """
import sys
from abc import ABCMeta

import numpy as np

from omni_core import GenerationResult
from omni_core.diffusion import DenoiseState, StagedPipeline
from omni_core.speech import AudioChunk, SpeechPipeline, Voice

#: (who read, attribute, reading module): reads made by omni_core code only.
READS = []


def _record(kind, name):
    if name.startswith("__") and name.endswith("__"):
        return  # Python's own machinery (isinstance reads __class__, ...)
    module = sys._getframe(2).f_globals.get("__name__", "")
    if module == "omni_core" or module.startswith("omni_core."):
        READS.append((kind, name, module))


class RecordingMeta(ABCMeta):
    def __getattribute__(cls, name):
        _record("class", name)
        return super().__getattribute__(name)


class RecordingVideo(StagedPipeline, metaclass=RecordingMeta):
    def __getattribute__(self, name):
        _record("instance", name)
        return object.__getattribute__(self, name)

    @classmethod
    def from_pretrained(cls, path, options):
        pipeline = cls()
        pipeline.options = options
        return pipeline

    def output_fps(self, request):
        return 8

    def prepare(self, request):
        return DenoiseState(request=request, num_steps=2)

    def step(self, states):
        for state in states:
            state.step_index += 1

    def batch_key(self, state):
        return state.num_steps

    def decode(self, state):
        frames = state.request.num_frames or 1
        return GenerationResult(video=np.zeros((frames, 8, 8, 3), np.uint8), fps=8)


class RecordingSpeech(SpeechPipeline, metaclass=RecordingMeta):
    def __getattribute__(self, name):
        _record("instance", name)
        return object.__getattribute__(self, name)

    @classmethod
    def from_pretrained(cls, path, options):
        pipeline = cls()
        pipeline.options = options
        return pipeline

    @classmethod
    def resolve_model(cls, model):
        from pathlib import Path

        folder = Path(str(model))
        return (folder, "calm") if (folder / "recorded-voice.txt").is_file() else None

    @classmethod
    def known_voices(cls):
        return [Voice(id="calm")]

    def voices(self):
        return [Voice(id="calm")]

    def stream(self, request):
        for _ in range(2):
            yield AudioChunk(samples=np.zeros(160, np.float32), sample_rate=16000)
"""


class _Plugin:
    """Registers the two recording pipelines (their module is written by the fixture)."""

    @staticmethod
    @hookimpl
    def omni_register_pipelines(register: Any) -> None:
        register(
            PipelineSpec(
                name="recording-video",
                tasks=("t2v",),
                architectures=("RecordingVideo",),
                implementation="contract_recorder:RecordingVideo",
            )
        )
        register(
            PipelineSpec(
                name="recording-speech",
                tasks=("tts",),
                architectures=("RecordingSpeech",),
                implementation="contract_recorder:RecordingSpeech",
            )
        )


@pytest.fixture
def recorder(
    omni_temp_distribution: Any, register_omni_plugin: Any, monkeypatch: pytest.MonkeyPatch
) -> Any:
    import importlib

    monkeypatch.delenv("OMNI_PLATFORM", raising=False)
    omni_temp_distribution("contract-recorder", {"contract_recorder": RECORDER})
    module = importlib.import_module("contract_recorder")
    register_omni_plugin(_Plugin(), "contract-recorder")
    return module


def _undeclared(module: Any) -> list[tuple[str, str, str]]:
    assert module.READS, "the recorder saw no read at all: the test drives nothing"
    return sorted({r for r in module.READS if r[1] not in DECLARED})


def test_staged_paths_read_only_declared_members(recorder: Any, tmp_path: Path) -> None:
    from omni_core import Omni
    from omni_core.contract.requests import build_request, clip_seconds, warmup_request
    from omni_core.runtime.engine import Engine
    from omni_core.runtime.staged import run_to_completion

    folder = tmp_path / "video"
    folder.mkdir()
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "RecordingVideo"}))
    with Omni(folder) as omni:
        assert omni.healthy
        result = omni.generate("a cat", num_frames=5, seed=1)
        assert result.video.shape[0] == 5
        pipeline = omni.pipeline
        request = build_request(pipeline, {"prompt": "a dog"}, seconds=1.0)
        assert request.num_frames == 9  # 1 s at the pipeline's 8 fps, + the first frame
        assert clip_seconds(pipeline, request) == 1.0
        run_to_completion(pipeline, [request, warmup_request(pipeline)])
        engine = Engine(pipeline, name="recording").start()
        try:
            assert engine.run(request, timeout=30).video.shape[0] == 9
        finally:
            engine.stop()
    assert _undeclared(recorder) == []


def test_speech_paths_read_only_declared_members(recorder: Any, tmp_path: Path) -> None:
    from omni_core import Omni
    from omni_core.cli import cli
    from omni_core.runtime.engine import Engine

    folder = tmp_path / "voice"
    folder.mkdir()
    (folder / "recorded-voice.txt").write_text("a voice folder without a checkpoint config")
    with Omni(folder) as omni:  # claimed through the class's resolve_model()
        assert omni.spec.name == "recording-speech"
        assert len(omni.generate("Hello there.").audio) == 320
        assert sum(len(c.samples) for c in omni.stream("Hello.")) == 320
        engine = Engine(omni.pipeline, name="recording-speech").start()
        try:
            engine.run(omni.request("Hi."), timeout=30)
        finally:
            engine.stop()
    out = tmp_path / "speech.wav"
    result = CliRunner().invoke(
        cli, ["generate", "speech", "Hello.", "--model", str(folder), "-o", str(out), "-q"]
    )
    assert _undeclared(recorder) == []  # first: names the member a failing command read
    assert result.exit_code == 0, result.output


# -- static checks over core/src -------------------------------------------------------------


def _core_modules() -> list[tuple[str, ast.Module]]:
    return [
        (path.relative_to(SRC.parent).as_posix(), ast.parse(path.read_text(encoding="utf-8")))
        for path in sorted(SRC.rglob("*.py"))
    ]


def _mentions_pipeline(expression: ast.AST) -> bool:
    return "pipe" in ast.unparse(expression).lower()


def test_core_never_probes_a_pipeline_with_getattr_or_hasattr() -> None:
    """``getattr(pipeline, "x", default)`` is how undeclared members crept in; it is refused
    for any object expression naming a pipeline (``pipeline``, ``self.pipeline``,
    ``served.omni.pipeline``, ``pipeline_cls``, ``pipe``, ...)."""
    probes = [
        f"{rel}:{node.lineno} {ast.unparse(node)[:90]}"
        for rel, tree in _core_modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in {"getattr", "hasattr", "setattr"}
        and node.args
        and _mentions_pipeline(node.args[0])
    ]
    assert probes == []


def test_core_reads_only_declared_members_of_pipeline_objects() -> None:
    """Every ``<expr>.pipeline.<name>`` / ``pipeline.<name>`` read names a declared member.

    (``pipe`` is diffusers' pipeline object inside the generic adapter, not an omni pipeline,
    and is not checked here.)
    """
    found = []
    for rel, tree in _core_modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
                continue
            base = ast.unparse(node.value).split(".")[-1]
            if base in {"pipeline", "_pipeline"} and node.attr not in DECLARED:
                found.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
    assert found == []


def test_core_has_no_attribute_probes_of_removed_pipeline_hooks() -> None:
    """The attributes and keywords of plugin API 1.x are gone from core code for good: read as
    attributes, passed or declared as parameters, defined as functions or spelled as strings
    (a local variable of the same name, e.g. a diffusers class, is not the API)."""
    removed = {"cache_adapter", "default_fps", "pipeline_cls", "auto_parallelize"}
    found = [
        f"{rel}:{node.lineno} {name}"
        for rel, tree in _core_modules()
        for node in ast.walk(tree)
        for name in _names(node)
        if name in removed
    ]
    assert found == []


def _names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword) and node.arg:
        return [node.arg]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return [node.name]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    return []
