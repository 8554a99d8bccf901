"""`omni new-plugin`: bad input, every kind renders valid code, and a generated package installed
with pip shows up in `omni list-plugins` and passes its own first test."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from omni_core.cli import cli
from omni_core.commands.new_plugin import KINDS
from omni_core.testing import assert_imports_only_faces


def _new(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["new-plugin", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("name", ["Bad_Name", "9lives", "double--dash", "omni-core", "core", "wan"])
def test_bad_name_exits_2_with_a_clear_error(name: str, tmp_path: Path) -> None:
    code, output = _new(name, "--kind", "model", "--output", str(tmp_path))
    assert code == 2
    assert "NAME" in output and "Traceback" not in output
    assert list(tmp_path.iterdir()) == []


def test_existing_directory_and_unknown_kind_exit_2(tmp_path: Path) -> None:
    (tmp_path / "omni-taken").mkdir()
    code, output = _new("taken", "--kind", "model", "--output", str(tmp_path))
    assert code == 2 and "already exists" in output
    code, output = _new("fine", "--kind", "scheduler", "--output", str(tmp_path))
    assert code == 2 and "'scheduler' is not one of" in output


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_writes_a_complete_package(kind: str, tmp_path: Path) -> None:
    code, output = _new(f"demo-{kind}", "--kind", kind, "--output", str(tmp_path))
    assert code == 0, output
    root = tmp_path / f"omni-demo-{kind}"
    module = f"omni_demo_{kind}"
    hook, kind_attr, impl_module, _, _ = KINDS[kind]
    for relative in (
        "pyproject.toml",
        "README.md",
        "CHANGELOG.md",
        "tox.ini",
        f"src/{module}/__init__.py",
        f"src/{module}/plugin.py",
        f"src/{module}/{impl_module}.py",
        f"tests/test_{module}_plugin.py",
    ):
        assert (root / relative).is_file(), relative
    pyproject = (root / "pyproject.toml").read_text()
    assert f'omni-demo-{kind} = "{module}.plugin"' in pyproject
    assert "omni-core" in pyproject and ">=0.3,<0.4" in pyproject
    assert "torch==2.13.0" in (root / "tox.ini").read_text()
    # Only a model needs the runtime (diffusers, transformers); a kernel needs torch alone.
    assert ("omni-core[runtime]" in pyproject) == (kind == "model"), pyproject
    assert ("torch>=" in pyproject) == (kind in ("attention", "cache", "quantizer")), pyproject
    readme = (root / "README.md").read_text()
    assert "](http" not in readme, readme  # no placeholder links
    if kind in ("attention", "cache", "quantizer"):
        # The comparison the implementation's docstring promises is generated with it.
        comparison = (root / f"tests/test_{module}_{impl_module}.py").read_text()
        assert f"from {module}.{impl_module} import" in comparison
    plugin_source = (root / f"src/{module}/plugin.py").read_text()
    assert f"def {hook}(" in plugin_source and "@hookimpl" in plugin_source
    assert f'"{module}.{impl_module}:' in plugin_source
    for path in root.rglob("*.py"):
        ast.parse(path.read_text(), filename=str(path))  # valid Python, placeholders filled
        assert "{{" not in path.read_text()
    test_source = (root / f"tests/test_{module}_plugin.py").read_text()
    assert "discoverable" in test_source and f"registry.{kind_attr}[" in test_source
    # The generated code is lint-clean under its own ruff config (ruff is in omni-core[test]).
    lint = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert lint.returncode == 0, lint.stdout


def test_generated_plugin_installed_with_pip_is_listed_and_its_own_test_passes(
    tmp_path: Path,
) -> None:
    code, output = _new("kit-check", "--kind", "attention", "--output", str(tmp_path))
    assert code == 0, output
    package = tmp_path / "omni-kit-check"
    site = tmp_path / "site"
    # A real pip install (wheel built from the generated pyproject, entry point and all) into a
    # private target directory: the shared environment is never modified, nothing to uninstall.
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--quiet",
            *isolation,
            "--target",
            str(site),
            str(package),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    assert list(site.glob("omni_kit_check-0.1.0.dist-info"))
    pythonpath = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": pythonpath}
    listed = subprocess.run(
        [sys.executable, "-m", "omni_core.cli", "list-plugins", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    plugins = {p["name"]: p for p in json.loads(listed.stdout)}
    mine = plugins["omni-kit-check"]
    assert mine["status"] == "ok" and mine["distribution"] == "omni-kit-check"
    assert mine["provides"]["attention_backends"] == ["kit-check"]
    own_test = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=package,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert own_test.returncode == 0, own_test.stdout[-3000:]
    # Discoverable, and the backend matches torch's SDPA (6 cases): torch is all it imports.
    assert "7 passed" in own_test.stdout, own_test.stdout[-1000:]


def test_the_model_kind_is_a_staged_pipeline_with_its_denoiser_and_uses_only_the_sdk(
    tmp_path: Path,
) -> None:
    code, output = _new("demo-dit", "--kind", "model", "--output", str(tmp_path))
    assert code == 0, output
    root = tmp_path / "omni-demo-dit"
    for relative in (
        "src/omni_demo_dit/denoiser.py",
        "src/omni_demo_dit/testing.py",
        "tests/test_omni_demo_dit_pipeline.py",
    ):
        assert (root / relative).is_file(), relative
    plugin_source = (root / "src/omni_demo_dit/plugin.py").read_text()
    assert "def omni_register_denoisers(" in plugin_source
    assert '"omni_demo_dit.denoiser:ADAPTER"' in plugin_source
    assert "cfg_parallel=True" in plugin_source and "sequence_parallel=True" in plugin_source
    pipeline_source = (root / "src/omni_demo_dit/pipeline.py").read_text()
    for call in ("route_attention(", "apply_acceleration(", "parallelize_denoiser("):
        assert call in pipeline_source, call
    # A third-party plugin needs nothing but the public SDK (omni-core's faces).
    assert_imports_only_faces((root / "src").rglob("*.py"), test_kit=False)
