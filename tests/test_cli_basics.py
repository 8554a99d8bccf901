"""`omni --version`, `--help`, and the promise that listing plugins never imports torch."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from click.testing import CliRunner

from omni_core import __version__
from omni_core.cli import COMMANDS, cli

HEAVY = ("torch", "numpy", "diffusers", "transformers", "PIL")


def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def test_version_and_help_list_every_builtin_command() -> None:
    runner = CliRunner()
    version = runner.invoke(cli, ["--version"])
    assert version.exit_code == 0 and version.output.strip() == f"omni, version {__version__}"
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert f"  {name} " in result.output


def test_unknown_command_and_bad_option_exit_2() -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["frobnicate"]).exit_code == 2
    assert runner.invoke(cli, ["list-plugins", "--yaml"]).exit_code == 2


def test_list_plugins_and_help_import_no_torch_and_start_fast() -> None:
    """A cold process: `-X importtime` shows every module imported; none of them is heavy."""
    for command in (["list-plugins", "--json"], ["--help"]):
        started = time.perf_counter()
        result = _run("-X", "importtime", "-m", "omni_core.cli", *command)
        elapsed = time.perf_counter() - started
        assert result.returncode == 0, result.stderr[-2000:]
        imported = {
            line.split("|")[-1].strip()
            for line in result.stderr.splitlines()
            if line.startswith("import time:") and "|" in line
        }
        assert "omni_core" in imported and "pluggy" in imported
        heavy = sorted(m for m in imported if m.split(".")[0] in HEAVY)
        assert heavy == [], f"omni {' '.join(command)} imported {heavy}"
        # The budget is 0.5 s on an idle machine; this bound only catches gross regressions
        # on a loaded CI box (importtime itself adds overhead).
        assert elapsed < 5.0, f"omni {' '.join(command)} took {elapsed:.2f} s"
