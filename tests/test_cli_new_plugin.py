"""`omni new-plugin`: bad input, every kind renders valid code, and generated packages installed
with pip show up in `omni list-plugins` and pass their own tests (a kernel's comparison; the
speech and chat kinds' checks against their plain loops, through the engine and `omni serve`)."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from omni_core.cli import cli
from omni_core.commands.new_plugin import KINDS, PIPELINE_KINDS, SERVED_KINDS
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
    # Only a pipeline needs the runtime (diffusers, transformers); a kernel needs torch alone.
    assert ("omni-core[runtime]" in pyproject) == (kind in PIPELINE_KINDS), pyproject
    assert ("torch>=" in pyproject) == (kind in ("attention", "cache", "quantizer")), pyproject
    # A served kind's tests start `omni serve` and ask it with the openai client.
    assert ('"omni-core[serve]' in pyproject and '"openai>=' in pyproject) == (
        kind in SERVED_KINDS
    ), pyproject
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
        assert not re.search(r"\{\{\w+\}\}", path.read_text()), path
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


#: What the install test generates: (NAME, kind, what `omni list-plugins` says it provides).
INSTALLED = (
    ("kit-check", "attention", "attention_backends"),
    ("kit-speech", "speech", "pipelines"),
    ("kit-chat", "chat", "pipelines"),
)


def test_generated_plugins_installed_with_pip_are_listed_and_their_own_tests_pass(
    tmp_path: Path,
) -> None:
    packages = []
    for name, kind, _ in INSTALLED:
        code, output = _new(name, "--kind", kind, "--output", str(tmp_path))
        assert code == 0, output
        packages.append(tmp_path / f"omni-{name}")
    site = tmp_path / "site"
    # A real pip install (wheels built from the generated pyprojects, entry points and all) into
    # a private target directory: the shared environment is never modified, nothing to
    # uninstall. One pip call for all of them.
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
            *map(str, packages),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    for name, _, _ in INSTALLED:
        assert list(site.glob(f"omni_{name.replace('-', '_')}-0.1.0.dist-info")), name
    pythonpath = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": pythonpath, "HF_HUB_OFFLINE": "1"}
    listed = subprocess.run(
        [sys.executable, "-m", "omni_core.cli", "list-plugins", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    plugins = {p["name"]: p for p in json.loads(listed.stdout)}
    for name, _, provides in INSTALLED:
        mine = plugins[f"omni-{name}"]
        assert mine["status"] == "ok" and mine["distribution"] == f"omni-{name}"
        assert mine["provides"][provides] == [name]
    # Every package's own tests, in one pytest process (torch and transformers import once).
    pytest_args = ["-q", "-p", "no:cacheprovider", "--durations=0"]
    own_tests = subprocess.run(
        [sys.executable, "-m", "pytest", *pytest_args, *(str(p / "tests") for p in packages)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert own_tests.returncode == 0, own_tests.stdout[-5000:]
    # attention: discoverable + matches torch's SDPA (6 cases), torch is all it imports;
    # speech and chat: discoverable + the plain loop alone, seeded, batched by the engine and
    # through `omni serve` (4 each).
    assert "17 passed" in own_tests.stdout, own_tests.stdout[-2000:]


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


@pytest.mark.parametrize(
    ("kind", "base", "task"),
    [
        ("speech", "AutoregressiveSpeechPipeline", "tts"),
        ("chat", "AutoregressiveChatPipeline", "chat"),
    ],
)
def test_the_speech_and_chat_kinds_are_autoregressive_pipelines_and_use_only_the_sdk(
    kind: str, base: str, task: str, tmp_path: Path
) -> None:
    code, output = _new(f"demo-{kind}", "--kind", kind, "--output", str(tmp_path))
    assert code == 0, output
    root, module = tmp_path / f"omni-demo-{kind}", f"omni_demo_{kind}"
    plugin_source = (root / f"src/{module}/plugin.py").read_text()
    assert f'tasks=("{task}",)' in plugin_source and "step_batching=True" in plugin_source
    pipeline_source = (root / f"src/{module}/pipeline.py").read_text()
    assert f"\nclass Demo{kind.capitalize()}Pipeline({base}):" in pipeline_source
    assert "sample_tokens(" in pipeline_source  # seeded sampling, the same alone or batched
    # The tiny checkpoint's builder and the plain loop the runtime must reproduce.
    testing_source = (root / f"src/{module}/testing.py").read_text()
    assert f"def build_tiny_demo_{kind}(" in testing_source
    assert "DynamicCache()" in testing_source and "save" in testing_source
    tests_source = (root / f"tests/test_{module}_pipeline.py").read_text()
    for check in ("Omni(", "Engine(", "omni_serve(", "openai.OpenAI("):
        assert check in tests_source, check
    # A third-party plugin needs nothing but the public SDK (omni-core's faces); its tests
    # may use the test kit too.
    assert_imports_only_faces((root / "src").rglob("*.py"), test_kit=False)
    assert_imports_only_faces((root / "tests").rglob("*.py"))
