"""`omni list-plugins` marks fallback pipelines and never imports the pipeline runtime."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from click.testing import CliRunner

from omni_core.cli import cli


def test_integration_list_plugins_marks_fallback_pipelines() -> None:
    runner = CliRunner()
    table = runner.invoke(cli, ["list-plugins"])
    assert table.exit_code == 0
    row = next(line for line in table.output.splitlines() if "omni-diffusers-adapter" in line)
    assert "pipelines: diffusers (fallback)" in row
    assert "wan-t2v (fallback)" not in table.output
    listed = json.loads(runner.invoke(cli, ["list-plugins", "--json"]).output)
    plugins = {p["name"]: p for p in listed}
    adapter = plugins["omni-diffusers-adapter"]
    assert adapter["provides"]["pipelines"] == ["diffusers"]  # the existing shape is kept
    assert adapter["fallback_pipelines"] == ["diffusers"]
    assert all(p["fallback_pipelines"] == [] for n, p in plugins.items() if n != adapter["name"])


def test_integration_adapter_hook_module_is_tiny() -> None:
    """The hook module must not import the pipeline runtime (omni_core.contract.pipeline); the
    spec it registers loads the adapter from the diffusion lane."""
    code = (
        "import sys, omni_core.builtins.diffusers_adapter as m\n"
        "assert 'omni_core.contract.pipeline' not in sys.modules, 'base imported'\n"
        "from omni_core.contract.host import get_registry\n"
        "print(get_registry().pipelines['diffusers'].load().__module__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "omni_core.diffusion.generic"
