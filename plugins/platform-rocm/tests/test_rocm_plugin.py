"""The installed distribution: entry point discovery, lazy imports, list-plugins, doctor."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

from omni_core.testing import installed_host, run_cli


def test_rocm_entry_point_is_discovered() -> None:
    points = {ep.name: ep.value for ep in metadata.entry_points(group="omni")}
    assert points.get("omni-platform-rocm") == "omni_platform_rocm.plugin"
    host = installed_host("omni-platform-rocm")
    host.infos()
    info = host.plugins["omni-platform-rocm"]
    assert info.status == "ok", info.error
    assert info.distribution == "omni-platform-rocm"
    provides = {kind: names for kind, names in info.provides.items() if names}
    assert provides == {
        "attention_backends": ["aiter", "flash-attn-ck"],
        "platforms": ["rocm"],
        "quantizers": ["fp8-rocm"],
    }


def test_rocm_plugin_module_imports_no_torch() -> None:
    code = (
        "import sys, omni_platform_rocm.plugin; "
        "sys.exit('torch imported' if 'torch' in sys.modules else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rocm_list_plugins_shows_the_platform(rocm_host) -> None:
    result = run_cli("list-plugins")
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith("omni-platform-rocm"))
    assert "platforms: rocm" in row and "attention_backends: aiter, flash-attn-ck" in row


def test_rocm_doctor_json_says_why_not(rocm_host, no_hip, clean_env) -> None:
    result = run_cli("doctor", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["selected_platform"]["name"] == "cpu"
    row = next(p for p in report["platforms"] if p["name"] == "rocm")
    assert row["usable"] is False and "not a ROCm build" in row["reason"]
    assert {r["distribution"]: r["requires"] for r in row["compatibility"]} == {
        "omni-core": ">=0.3,<0.4",
        "torch": ">=2.5",
    }
    aiter = next(b for b in report["attention_backends"] if b["name"] == "aiter")
    assert aiter["usable"] is False and aiter["reason"]
    fp8 = next(q for q in report["quantizers"] if q["name"] == "fp8-rocm")
    assert fp8["usable"] is False and fp8["reason"] == "runs on cuda, not on cpu"


def test_rocm_doctor_forced_but_unavailable(rocm_host, no_hip, clean_env, monkeypatch) -> None:
    monkeypatch.setenv("OMNI_PLATFORM", "rocm")
    result = run_cli("doctor")
    assert result.exit_code != 0
    assert isinstance(result.exception, SystemExit)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: platform 'rocm' was forced by OMNI_PLATFORM")
    assert "Traceback" not in result.output


def test_rocm_discoverable_and_specs_validate_strictly() -> None:
    """omni-core's plugin-author check: strict load, right API, every lazy reference resolves."""
    from omni_core.testing import assert_plugin_discoverable

    registry = assert_plugin_discoverable("omni-platform-rocm")
    assert registry.platforms["rocm"].plugin == "omni-platform-rocm"
