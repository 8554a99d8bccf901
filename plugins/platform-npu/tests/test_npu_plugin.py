"""The installed distribution: entry point discovery, lazy imports, the CLI."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

from click.testing import CliRunner

from omni_core.cli import cli
from omni_core.plugins import PluginHost, set_host


def test_npu_entry_point_is_discovered() -> None:
    points = {ep.name: ep.value for ep in metadata.entry_points(group="omni")}
    assert points.get("omni-platform-npu") == "omni_platform_npu.plugin"
    host = PluginHost(autoload=True, allow=["omni-platform-npu"])
    info = host.plugins["omni-platform-npu"]
    host.infos()
    assert info.status == "ok", info.error
    assert info.distribution == "omni-platform-npu"
    provides = {kind: names for kind, names in info.provides.items() if names}
    assert provides == {"attention_backends": ["npu-fusion"], "platforms": ["npu"]}


def test_npu_plugin_module_imports_no_torch() -> None:
    code = (
        "import sys, omni_platform_npu.plugin, omni_platform_npu.detect; "
        "from omni_platform_npu.detect import detect_npu; detect_npu(); "
        "bad = [m for m in ('torch', 'torch_npu') if m in sys.modules]; "
        "sys.exit(', '.join(bad) if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_npu_list_plugins_shows_the_platform(npu_host) -> None:
    previous = set_host(npu_host)
    try:
        result = CliRunner().invoke(cli, ["list-plugins"])
    finally:
        set_host(previous)
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith("omni-platform-npu"))
    assert "platforms: npu" in row and "attention_backends: npu-fusion" in row
