"""The installed distribution: entry point discovery, lazy imports, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

from omni_core.testing import installed_host, run_cli


def test_npu_entry_point_is_discovered() -> None:
    points = {ep.name: ep.value for ep in metadata.entry_points(group="omni")}
    assert points.get("omni-platform-npu") == "omni_platform_npu.plugin"
    host = installed_host("omni-platform-npu")
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
    result = run_cli("list-plugins")
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith("omni-platform-npu"))
    assert "platforms: npu" in row and "attention_backends: npu-fusion" in row


def test_npu_doctor_json_says_why_not(npu_host, no_torch_npu, clean_env) -> None:
    result = run_cli("doctor", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["selected_platform"]["name"] == "cpu"
    row = next(p for p in report["platforms"] if p["name"] == "npu")
    assert row["usable"] is False and "torch_npu is not installed" in row["reason"]
    compat = {r["distribution"]: r for r in row["compatibility"]}
    assert compat["torch-npu"]["requires"] == ">=2.5.1"
    assert compat["torch-npu"]["installed"] is None
    assert compat["omni-core"]["satisfied"] is True
    fusion = next(b for b in report["attention_backends"] if b["name"] == "npu-fusion")
    assert fusion["usable"] is False and "runs on npu" in fusion["reason"]


def test_npu_doctor_forced_but_unavailable(npu_host, no_torch_npu, clean_env, monkeypatch) -> None:
    monkeypatch.setenv("OMNI_PLATFORM", "npu")
    result = run_cli("doctor")
    assert result.exit_code != 0
    assert isinstance(result.exception, SystemExit)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: platform 'npu' was forced by OMNI_PLATFORM")
    assert "torch_npu is not installed" in lines[0]
    assert "Traceback" not in result.output


def test_npu_discoverable_and_specs_validate_strictly() -> None:
    """omni-core's plugin-author check: strict load, right API, every lazy reference resolves."""
    from omni_core.testing import assert_plugin_discoverable

    registry = assert_plugin_discoverable("omni-platform-npu")
    assert registry.platforms["npu"].plugin == "omni-platform-npu"
