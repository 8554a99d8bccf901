"""`omni list-plugins`: built-ins, installed plugins, broken ones, and the JSON schema."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from omni_core.cli import cli
from omni_core.contract.host import set_host

KINDS = {
    "pipelines",
    "attention_backends",
    "cache_backends",
    "quantizers",
    "platforms",
    "denoisers",
    "benchmarks",
}


@pytest.fixture
def fresh_host() -> Iterator[None]:
    """Let the CLI build its process host from the environment, then restore the old one."""
    previous = set_host(None)
    yield
    set_host(previous)


def _list(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["list-plugins", *args])
    return result.exit_code, result.output


def test_json_lists_builtins_and_installed_plugins_with_the_schema(fresh_host: None) -> None:
    code, output = _list("--json")
    assert code == 0
    plugins = {p["name"]: p for p in json.loads(output)}
    for plugin in plugins.values():
        assert {"name", "distribution", "version", "status", "error", "hooks", "provides"} <= set(
            plugin
        )
        assert plugin["status"] in {"ok", "error"}
        assert set(plugin["provides"]) == KINDS
    assert plugins["omni-platforms"]["provides"]["platforms"][:2] == ["cpu", "cuda"]
    assert plugins["omni-platforms"]["distribution"] == "omni-core"
    assert "sdpa" in plugins["omni-attention"]["provides"]["attention_backends"]
    assert plugins["omni-attention"]["hooks"] == ["omni_register_attention_backends"]
    # Every installed plugin package of this repo is discovered through its entry point.
    from importlib import metadata

    installed = {ep.name for ep in metadata.entry_points(group="omni")}
    assert installed <= set(plugins)


def test_a_broken_plugin_is_listed_with_its_error_and_the_command_exits_0(
    fresh_host: None,
    omni_temp_distribution: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    omni_temp_distribution(
        "omni-test-exploding",
        {"omni_test_exploding.plugin": "raise RuntimeError('vendor SDK not found')\n"},
    )
    omni_temp_distribution("omni-test-hookless", {"omni_test_hookless.plugin": "VALUE = 1\n"})
    monkeypatch.setenv("OMNI_LOAD_PLUGINS", "omni-test-exploding,omni-test-hookless")
    code, output = _list("--json")
    assert code == 0
    plugins = {p["name"]: p for p in json.loads(output)}
    exploding = plugins["omni-test-exploding"]
    assert exploding["status"] == "error"
    assert exploding["error"] == (
        "failed to import omni_test_exploding.plugin: RuntimeError: vendor SDK not found"
    )
    assert exploding["distribution"] == "omni-test-exploding" and exploding["version"] == "0.1.0"
    hookless = plugins["omni-test-hookless"]
    assert (hookless["status"], hookless["error"], hookless["hooks"]) == ("ok", None, [])
    assert "omni-wan" not in plugins  # the allow-list kept the others out

    set_host(None)
    code, table = _list()
    assert code == 0
    row = next(line for line in table.splitlines() if line.startswith("omni-test-exploding"))
    assert row.split()[3] == "error"
    assert "omni-test-exploding: failed to import" in table
