"""`omni doctor`: platform choice and why, versions, usability; clean errors when forced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from click.testing import CliRunner

from omni_core.cli import cli
from omni_core.contract.platforms import reset_platform


@pytest.fixture(autouse=True)
def _no_forced_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMNI_PLATFORM", raising=False)
    reset_platform()


def test_doctor_json_reports_platform_versions_and_usability() -> None:
    result = CliRunner().invoke(cli, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # stderr may carry import-time notes (torchao)
    selected = report["selected_platform"]
    assert selected["name"] == "cpu" and selected["device_count"] == 1
    assert "highest-priority available platform" in selected["reason"]
    assert "cuda:" in selected["reason"]  # why cuda was skipped
    assert report["versions"]["torch"] == metadata.version("torch")
    assert report["versions"]["diffusers"] == metadata.version("diffusers")
    assert report["versions"]["transformers"] == metadata.version("transformers")
    platforms = {p["name"]: p for p in report["platforms"]}
    assert platforms["cpu"]["usable"] and not platforms["cuda"]["usable"]
    assert platforms["cuda"]["reason"]
    row = platforms["cpu"]["compatibility"][0]
    assert row["distribution"] == "torch" and row["satisfied"] is True
    backends = {b["name"]: b for b in report["attention_backends"]}
    assert backends["sdpa"]["usable"]
    assert backends["sdpa-cudnn"] == {
        **backends["sdpa-cudnn"],
        "usable": False,
        "reason": "runs on cuda, not on cpu",
    }
    for kind in ("cache_backends", "quantizers"):
        for item in report[kind]:
            assert isinstance(item["usable"], bool)
            assert item["usable"] or item["reason"], item
    assert report["attention_routing"]["self"]["backend"] == "sdpa"


def test_doctor_text_and_config_routing(tmp_path: Path) -> None:
    config = tmp_path / "omni.toml"
    config.write_text('[attention]\ncross = "sdpa-flash"\n')
    result = CliRunner().invoke(cli, ["doctor", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "platform: cpu (" in result.output
    assert "cross  sdpa-flash -> ERROR: " in result.output
    assert "platform compatibility:" in result.output
    result = CliRunner().invoke(cli, ["doctor", "--set", "attention.self=sdpa-math"])
    assert "self   sdpa-math -> sdpa-math" in result.output


def test_doctor_bad_config_exits_2_naming_the_field(tmp_path: Path) -> None:
    config = tmp_path / "omni.toml"
    config.write_text("[engine]\nmax_batch = 0\n")
    result = CliRunner().invoke(cli, ["doctor", "--config", str(config)])
    assert result.exit_code == 2
    assert result.output.startswith("Error: engine.max_batch: ")


@pytest.mark.parametrize(
    ("platform", "message"),
    [
        ("unknown", "Error: unknown platform 'unknown' (OMNI_PLATFORM); registered: "),
        ("cuda", "Error: platform 'cuda' was forced by OMNI_PLATFORM but is not available: "),
    ],
)
def test_forced_platform_errors_are_one_line_without_traceback(platform: str, message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "omni_core.cli", "doctor"],
        capture_output=True,
        text=True,
        env={**os.environ, "OMNI_PLATFORM": platform},
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), result.stderr
    assert "Traceback" not in result.stderr


def _index(folder: Path, class_name: str, **components: str) -> Path:
    folder.mkdir()
    entries = {name: ["diffusers", cls] for name, cls in components.items()}
    (folder / "model_index.json").write_text(json.dumps({"_class_name": class_name, **entries}))
    return folder


def test_doctor_model_names_the_first_class_pipeline_and_its_denoiser(tmp_path: Path) -> None:
    """`omni doctor FOLDER` reads the configs only (no weights here) and says which plugin's
    pipeline serves the folder and which denoiser spec describes its transformer."""
    from omni_core.contract.host import get_registry

    registry = get_registry()
    spec = next(s for s in registry.pipelines.values() if not s.fallback and s.architectures)
    denoiser = next(iter(registry.denoisers.values()))
    folder = _index(tmp_path / "ckpt", spec.architectures[0], transformer=denoiser.architectures[0])
    result = CliRunner().invoke(cli, ["doctor", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    route = json.loads(result.stdout)["model"]
    assert route["route"] == "first-class"
    assert (route["pipeline"], route["plugin"]) == (spec.name, spec.plugin)
    assert route["denoisers"] == [
        {
            "component": "transformer",
            "class": denoiser.architectures[0],
            "denoiser": denoiser.name,
            "plugin": denoiser.plugin,
        }
    ]
    text = CliRunner().invoke(cli, ["doctor", str(folder)]).output
    assert f"pipeline: {spec.name} from {spec.plugin} (first-class" in text


def test_doctor_model_says_when_the_generic_adapter_takes_a_folder(tmp_path: Path) -> None:
    folder = _index(tmp_path / "other", "SomeUnclaimedPipeline", unet="SomeUNet")
    result = CliRunner().invoke(cli, ["doctor", str(folder)])
    assert result.exit_code == 0, result.output
    assert "(generic adapter;" in result.output
    assert "no component's class has a registered denoiser spec" in result.output


def test_doctor_model_that_is_not_there_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["doctor", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1] == (
        f"Error: model '{tmp_path / 'missing'}': no such folder, and not a Hub id (org/name)"
    )
