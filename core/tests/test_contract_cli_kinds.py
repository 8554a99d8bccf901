"""`omni list-plugins` and `omni doctor` show every spec kind, the new ones included.

A throwaway model plugin registers a pipeline, a denoiser and a benchmark workload (plus one
workload whose pipeline nobody registered); both commands list them, as a table and as JSON.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from omni_core import BenchmarkSpec, DenoiserSpec, PipelineSpec, hookimpl
from omni_core.cli import cli
from omni_core.contract.registry import SPEC_TYPES


class _ModelPlugin:
    @staticmethod
    @hookimpl
    def omni_register_pipelines(register: Any) -> None:
        register(
            PipelineSpec(
                name="kinds-model",
                tasks=("t2i",),
                architectures=("KindsPipe",),
                implementation="omni_core.contract.pipeline:StagedPipeline",
            )
        )

    @staticmethod
    @hookimpl
    def omni_register_denoisers(register: Any) -> None:
        register(
            DenoiserSpec(
                name="kinds-transformer",
                architectures=("KindsTransformer",),
                implementation="omni_core.diffusion.denoisers:generic_adapter",
            )
        )

    @staticmethod
    @hookimpl
    def omni_register_benchmarks(register: Any) -> None:
        register(
            BenchmarkSpec(
                name="kinds-tiny",
                pipeline="kinds-model",
                tiny=True,
                implementation="omni_core.bench:Workload",
            )
        )
        register(
            BenchmarkSpec(
                name="kinds-orphan",
                pipeline="nobody",
                implementation="omni_kinds_missing.bench:WORKLOAD",
            )
        )


@pytest.fixture(autouse=True)
def _plugin(register_omni_plugin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMNI_PLATFORM", raising=False)
    register_omni_plugin(_ModelPlugin(), "omni-kinds")


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout  # a library's load warnings on stderr are not the command's output


def test_list_plugins_shows_denoisers_and_benchmarks() -> None:
    plugins = {p["name"]: p for p in json.loads(_run("list-plugins", "--json"))}
    for plugin in plugins.values():
        assert set(plugin["provides"]) == set(SPEC_TYPES)  # every kind, empty or not
    mine = plugins["omni-kinds"]["provides"]
    assert mine["denoisers"] == ["kinds-transformer"]
    assert mine["benchmarks"] == ["kinds-orphan", "kinds-tiny"]
    assert set(plugins["omni-kinds"]["hooks"]) >= {
        "omni_register_denoisers",
        "omni_register_benchmarks",
    }
    row = next(line for line in _run("list-plugins").splitlines() if line.startswith("omni-kinds"))
    assert "denoisers: kinds-transformer" in row
    assert "benchmarks: kinds-orphan, kinds-tiny" in row


def test_doctor_shows_denoisers_and_benchmarks_with_usability() -> None:
    report = json.loads(_run("doctor", "--json"))
    denoisers = {d["name"]: d for d in report["denoisers"]}
    assert denoisers["kinds-transformer"] == {
        "name": "kinds-transformer",
        "plugin": "omni-kinds",
        "architectures": ["KindsTransformer"],
        "usable": True,
        "reason": "",
    }
    benchmarks = {b["name"]: b for b in report["benchmarks"]}
    assert benchmarks["kinds-tiny"]["usable"] and benchmarks["kinds-tiny"]["tiny"] is True
    assert benchmarks["kinds-tiny"]["pipeline"] == "kinds-model"
    orphan = benchmarks["kinds-orphan"]
    assert not orphan["usable"] and "omni_kinds_missing" in orphan["reason"]
    text = _run("doctor")
    assert "denoisers:" in text and "benchmarks:" in text
    assert "kinds-transformer" in text and "KindsTransformer" in text
    assert any("kinds-orphan" in line and " no " in line for line in text.splitlines())
