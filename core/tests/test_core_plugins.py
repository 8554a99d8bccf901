"""The plugin host: hooks, API versions, broken plugins, duplicates, env switches, tracing."""

from __future__ import annotations

import types
from collections.abc import Callable
from pathlib import Path

import pytest

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.contract.errors import PluginError
from omni_core.contract.host import PluginHost, api_compatible, get_host
from omni_core.contract.registry import AttentionBackendSpec, PlatformSpec

GOOD_PLUGIN = """
from omni_core import hookimpl
from omni_core.contract.registry import AttentionBackendSpec

OMNI_PLUGIN_API = "2.0"

@hookimpl
def omni_register_attention_backends(register):
    register(AttentionBackendSpec(
        name="{name}", implementation="omni_core.runtime.kernels.sdpa:sdpa", device_types=("cpu",),
    ))
"""


def _backend(name: str, **kw: object) -> AttentionBackendSpec:
    return AttentionBackendSpec(
        name=name, implementation="omni_core.runtime.kernels.sdpa:sdpa", device_types=("cpu",), **kw
    )


class Registers:
    """A throwaway plugin registering the given attention backends."""

    OMNI_PLUGIN_API = PLUGIN_API_VERSION

    def __init__(self, *specs: AttentionBackendSpec) -> None:
        self.specs = specs

    @hookimpl
    def omni_register_attention_backends(self, register: Callable[..., None]) -> None:
        for spec in self.specs:
            register(spec)


def _host(**kw: object) -> PluginHost:
    return PluginHost(autoload=False, trace=False, **kw)  # type: ignore[arg-type]


# -- API versions ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("declared", "provided", "ok"),
    [
        ("1.0", "1.0", True),
        ("1.0", "1.3", True),
        ("1.4", "1.3", False),  # plugin needs a newer minor than this core has
        ("2.0", "1.9", False),
        ("0.9", "1.0", False),
        ("one", "1.0", False),
    ],
)
def test_api_compatibility_rule(declared: str, provided: str, ok: bool) -> None:
    assert api_compatible(declared, provided) is ok


def test_wrong_api_major_is_reported_and_not_loaded() -> None:
    host = _host()
    plugin = Registers(_backend("future"))
    plugin.OMNI_PLUGIN_API = "3.0"
    info = host.register_object("future-plugin", plugin)
    assert info.status == "error"
    assert "plugin API 3.0" in (info.error or "") and PLUGIN_API_VERSION in (info.error or "")
    assert "future" not in host.registry.attention_backends
    assert host.pm.get_plugin("future-plugin") is None


# -- hooks -------------------------------------------------------------------------------------
def test_misspelled_hook_fails_loudly_naming_the_plugin_and_the_fix() -> None:
    class Typo:
        @hookimpl
        def omni_register_pipeline(self, register: Callable[..., None]) -> None: ...

    host = _host()
    info = host.register_object("typo-plugin", Typo())
    assert info.status == "error"
    assert "'typo-plugin'" in (info.error or "")
    assert "did you mean 'omni_register_pipelines'" in (info.error or "")
    with pytest.raises(PluginError, match="typo-plugin"):
        _host(strict=True).register_object("typo-plugin", Typo())


def test_hook_named_right_but_not_marked_is_an_error() -> None:
    module = types.ModuleType("unmarked_plugin")
    module.omni_register_platforms = lambda register: None  # type: ignore[attr-defined]
    info = _host().register_object("unmarked", module)
    assert info.status == "error"
    assert "not marked with @hookimpl" in (info.error or "")


def test_wrong_hook_argument_name_is_rejected_by_pluggy_validation() -> None:
    class BadArgs:
        @hookimpl
        def omni_register_platforms(self, registrar: Callable[..., None]) -> None: ...

    info = _host().register_object("bad-args", BadArgs())
    assert info.status == "error" and "registrar" in (info.error or "")


def test_plugin_without_hooks_is_listed_ok() -> None:
    host = _host()
    info = host.register_object("empty", types.ModuleType("empty_plugin"))
    assert info.status == "ok" and info.hooks == []
    assert info.as_dict()["provides"]["pipelines"] == []


def test_failing_hook_marks_only_that_plugin_broken() -> None:
    class Raises:
        @hookimpl
        def omni_register_attention_backends(self, register: Callable[..., None]) -> None:
            register(_backend("half-done"))
            raise RuntimeError("boom")

    host = _host()
    host.register_object("good", Registers(_backend("good-one")))
    bad = host.register_object("raises", Raises())
    registry = host.registry
    assert "good-one" in registry.attention_backends
    assert "half-done" not in registry.attention_backends  # nothing from a failed plugin
    assert bad.status == "error" and "RuntimeError: boom" in (bad.error or "")
    assert "sdpa" in registry.attention_backends  # built-ins unaffected


def test_registering_the_wrong_kind_is_an_error() -> None:
    class WrongKind:
        @hookimpl
        def omni_register_attention_backends(self, register: Callable[..., None]) -> None:
            register(PlatformSpec(name="x", implementation="a:b", detector="a:c", device_type="x"))

    host = _host()
    info = host.register_object("wrong-kind", WrongKind())
    host.registry  # noqa: B018
    assert "must register attention_backends specs, got PlatformSpec" in (info.error or "")


# -- duplicates --------------------------------------------------------------------------------
def test_duplicate_across_plugins_names_both_and_adds_nothing_from_the_second() -> None:
    host = _host()
    host.register_object("alpha", Registers(_backend("shared")))
    beta = host.register_object("beta", Registers(_backend("beta-only"), _backend("shared")))
    registry = host.registry
    assert registry.attention_backends["shared"].plugin == "alpha"
    assert "beta-only" not in registry.attention_backends  # all or nothing per plugin
    assert beta.status == "error"
    assert "'alpha'" in (beta.error or "") and "'beta'" in (beta.error or "")
    # Rebuilding the registry reports the same error once, not twice.
    host._registry = None
    host.registry  # noqa: B018
    assert (beta.error or "").count("registered by both") == 1


def test_duplicate_of_a_builtin_is_refused_but_an_override_replaces_it() -> None:
    host = _host()
    clash = host.register_object("clash", Registers(_backend("sdpa")))
    assert host.registry.attention_backends["sdpa"].plugin == "omni-attention"
    assert clash.status == "error" and "'omni-attention'" in (clash.error or "")

    host = _host()
    # "aaa" sorts before the built-in names, yet an override is applied after them.
    host.register_object("aaa-vendor", Registers(_backend("sdpa", overrides=True)))
    assert host.registry.attention_backends["sdpa"].plugin == "aaa-vendor"


def test_strict_host_raises_on_a_duplicate() -> None:
    host = _host(strict=True)
    host.register_object("clash", Registers(_backend("sdpa")))
    with pytest.raises(PluginError, match="registered by both"):
        host.registry  # noqa: B018


# -- entry points (a real dist-info on sys.path) -------------------------------------------------
def test_entry_point_plugins_good_broken_and_wrong_api(
    omni_temp_distribution: Callable[..., Path],
) -> None:
    omni_temp_distribution(
        "omni-test-good", {"omni_test_good.plugin": GOOD_PLUGIN.format(name="from-entry-point")}
    )
    omni_temp_distribution(
        "omni-test-broken",
        {"omni_test_broken.plugin": "raise ImportError('missing vendor library libfoo.so')"},
    )
    omni_temp_distribution(
        "omni-test-future",
        {"omni_test_future.plugin": GOOD_PLUGIN.format(name="x").replace('"2.0"', '"3.0"')},
        version="3.1.4",
    )
    omni_temp_distribution("omni-test-nohooks", {"omni_test_nohooks.plugin": "X = 1\n"})
    host = PluginHost(
        allow={"omni-test-good", "omni-test-broken", "omni-test-future", "omni-test-nohooks"},
        trace=False,
    )
    infos = {i.name: i for i in host.infos()}
    assert {name for name, info in infos.items() if not info.builtin} == {
        "omni-test-good",
        "omni-test-broken",
        "omni-test-future",
        "omni-test-nohooks",
    }
    assert {"omni-attention", "omni-platforms"} <= set(infos)
    good = infos["omni-test-good"]
    assert (good.status, good.distribution, good.version) == ("ok", "omni-test-good", "0.1.0")
    assert good.provides["attention_backends"] == ["from-entry-point"]
    broken = infos["omni-test-broken"]
    assert broken.status == "error"
    assert "ImportError: missing vendor library libfoo.so" in (broken.error or "")
    future = infos["omni-test-future"]
    assert future.status == "error" and future.version == "3.1.4"
    assert "plugin API 3.0" in (future.error or "") and "omni-test-future" in (future.error or "")
    assert infos["omni-test-nohooks"].status == "ok"
    assert "from-entry-point" in host.registry.attention_backends


def test_env_allow_list_and_autoload_switch(
    omni_temp_distribution: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    omni_temp_distribution("omni-test-a", {"omni_test_a.plugin": GOOD_PLUGIN.format(name="a")})
    omni_temp_distribution("omni-test-b", {"omni_test_b.plugin": GOOD_PLUGIN.format(name="b")})
    monkeypatch.setenv("OMNI_LOAD_PLUGINS", "omni-test-b")
    assert {i.name for i in PluginHost().infos() if not i.builtin} == {"omni-test-b"}
    monkeypatch.setenv("OMNI_LOAD_PLUGINS", "")
    assert [i.name for i in PluginHost().infos() if not i.builtin] == []
    monkeypatch.delenv("OMNI_LOAD_PLUGINS")
    monkeypatch.setenv("OMNI_DISABLE_PLUGIN_AUTOLOAD", "1")
    host = PluginHost()
    assert all(i.builtin for i in host.infos())
    assert "sdpa" in host.registry.attention_backends  # built-ins still load
    monkeypatch.delenv("OMNI_DISABLE_PLUGIN_AUTOLOAD")
    names = {i.name for i in PluginHost().infos()}
    assert {"omni-test-a", "omni-test-b"} <= names


def test_trace_prints_each_hook_call(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OMNI_TRACE_PLUGINS", "1")
    host = PluginHost(autoload=False)
    host.register_object("traced", Registers(_backend("traced-one")))
    host.registry  # noqa: B018
    err = capsys.readouterr().err
    assert "omni-trace: omni-platforms.omni_register_platforms()" in err
    assert "omni-trace: traced.omni_register_attention_backends()" in err
    assert "traced registered attention_backends 'traced-one'" in err


# -- the pytest kit ----------------------------------------------------------------------------
def test_omni_host_fixture_is_isolated_and_is_the_process_host(omni_host: PluginHost) -> None:
    assert get_host() is omni_host
    assert all(info.builtin for info in omni_host.infos())  # installed plugins never leak in


def test_register_omni_plugin_fixture_registers_objects_and_modules(
    register_omni_plugin: Callable[..., object],
) -> None:
    registry = register_omni_plugin(Registers(_backend("throwaway")), "throwaway")
    assert registry.attention_backends["throwaway"].plugin == "throwaway"  # type: ignore[attr-defined]
    module = types.ModuleType("throwaway_module")
    module.omni_register_pipeline = hookimpl(lambda register: None)  # type: ignore[attr-defined]
    with pytest.raises(PluginError, match="omni_register_pipelines"):
        register_omni_plugin(module)


def test_discoverable_helper_validates_references(
    omni_temp_distribution: Callable[..., Path],
) -> None:
    from omni_core.testing import assert_plugin_discoverable

    omni_temp_distribution("omni-test-ok", {"omni_test_ok.plugin": GOOD_PLUGIN.format(name="ok")})
    registry = assert_plugin_discoverable("omni-test-ok")
    assert registry.attention_backends["ok"].plugin == "omni-test-ok"
    dangling = GOOD_PLUGIN.format(name="dangling").replace(
        "omni_core.runtime.kernels.sdpa:sdpa", "omni_test_missing.kernels:attn"
    )
    omni_temp_distribution("omni-test-dangling", {"omni_test_dangling.plugin": dangling})
    with pytest.raises(AssertionError, match=r"module 'omni_test_missing\.kernels' does not exist"):
        assert_plugin_discoverable("omni-test-dangling")
    with pytest.raises(AssertionError, match="no entry point"):
        assert_plugin_discoverable("omni-test-not-installed")


def test_plugins_add_cli_commands_and_a_failing_one_is_reported() -> None:
    import click

    class AddsCommand:
        @hookimpl
        def omni_register_commands(self, cli: click.Group) -> None:
            @cli.command("hello")
            def hello() -> None:
                click.echo("hi")

    class Fails:
        @hookimpl
        def omni_register_commands(self, cli: click.Group) -> None:
            raise ValueError("no click for you")

    host = _host()
    host.register_object("adds", AddsCommand())
    fails = host.register_object("fails", Fails())
    group = click.Group("omni")
    host.add_commands(group)
    assert "hello" in group.commands
    assert fails.status == "error" and "omni_register_commands failed: ValueError" in (
        fails.error or ""
    )
    host.registry  # noqa: B018 - building the registry keeps the command-hook error
    assert fails.status == "error"
