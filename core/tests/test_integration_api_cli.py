"""Integration fixes: Omni.request extras, speech references in Omni, acceleration CLI options."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from omni_core.api import Omni, resolve_model_reference
from omni_core.contract.errors import ConfigError, InvalidRequestError


class _Recorder:
    """A pipeline stand-in whose validate() returns the request as built."""

    adapters = None  # Pipeline.adapters: no LoRA adapters loaded

    def validate(self, request: Any) -> Any:
        return request


def _bare_omni() -> Omni:
    omni = object.__new__(Omni)
    omni.pipeline = _Recorder()  # type: ignore[assignment]
    return omni


def test_integration_request_merges_extras_dict() -> None:
    omni = _bare_omni()
    request = omni.request("a cat", seed=3, flow_shift=2.0, extras={"cfg_batch": True})
    assert request.seed == 3
    assert request.extras == {"flow_shift": 2.0, "cfg_batch": True}
    assert "extras" not in request.extras


def test_integration_request_refuses_shared_field_in_extras() -> None:
    omni = _bare_omni()
    with pytest.raises(InvalidRequestError) as info:
        omni.request("a cat", extras={"seed": 3})
    assert info.value.param == "extras.seed"
    assert "shared field" in str(info.value)
    with pytest.raises(InvalidRequestError, match="both as a keyword and in extras"):
        omni.request("a cat", flow_shift=1.0, extras={"flow_shift": 2.0})
    with pytest.raises(InvalidRequestError, match="expected a dict"):
        omni.request("a cat", extras=["x"])


def test_integration_model_reference_leaves_checkpoints_and_hub_ids(tmp_path: Path) -> None:
    assert resolve_model_reference("org/some-model") == ("org/some-model", {})
    (tmp_path / "model_index.json").write_text("{}")
    assert resolve_model_reference(tmp_path) == (tmp_path, {})
    assert resolve_model_reference("piper", "vits") == ("piper", {})


def test_integration_omni_finds_default_piper_voice() -> None:
    pytest.importorskip("piper")
    from omni_tts.piper import default_voice_dir

    if default_voice_dir() is None:
        pytest.skip("no default Piper voice package installed")
    ref, kwargs = resolve_model_reference("piper")
    assert kwargs["pipeline"] == "piper" and Path(ref) == default_voice_dir()
    omni = Omni("piper")
    assert omni.spec.name == "piper"
    result = omni.generate("Hello.")
    assert result.audio is not None and len(result.audio) > 1000 and result.sample_rate > 0


def test_integration_serve_preflight_maps_piper(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("piper")
    from omni_core.commands.serve import _preflight
    from omni_core.serving import ServerConfig

    config = ServerConfig(models=[{"id": "piper", "path": "piper"}])
    _preflight(config)  # raised ModelNotFoundError before the fix


# ------------------------------------------------------------------------- acceleration CLI
def test_integration_acceleration_kwargs_checks_names() -> None:
    from omni_core.commands.generate import acceleration_kwargs

    assert acceleration_kwargs(None, (), None, None) == {}
    assert acceleration_kwargs("teacache", ("threshold=0.1",), "fp8", False) == {
        "cache": {"backend": "teacache", "options": {"threshold": 0.1}},
        "quantization": "fp8",
        "compile": False,
    }
    with pytest.raises(ConfigError, match=r"cache\.backend: unknown cache backend 'nope'"):
        acceleration_kwargs("nope", (), None, None)
    with pytest.raises(ConfigError, match=r"quantization\.method: unknown quantizer 'nope'"):
        acceleration_kwargs(None, (), "nope", None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cache", "bogus"], "unknown cache backend 'bogus'"),
        (["--quantization", "bogus"], "unknown quantizer 'bogus'"),
        (["--cache-option", "a=1"], "needs --cache"),
    ],
)
def test_integration_generate_rejects_unknown_acceleration(args: list[str], message: str) -> None:
    from omni_core.cli import cli

    result = CliRunner().invoke(cli, ["generate", "image", "no/such-model", "p", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_integration_generate_passes_acceleration_to_omni(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import omni_core.api
    import omni_core.runtime.loading as loading
    from omni_core.cli import cli

    class _Pipeline:
        @staticmethod
        def precheck(path: Path, request: Any) -> Any:
            return request

    spec = SimpleNamespace(name="fake", fallback=False, modality="image", load=lambda: _Pipeline)
    monkeypatch.setattr(loading, "resolve_model_path", lambda model, **kw: tmp_path)
    monkeypatch.setattr(loading, "find_pipeline", lambda registry, path, pipeline: spec)
    seen: dict[str, Any] = {}

    class _Stop(Exception):
        pass

    def fake_omni(path: Path, **kwargs: Any) -> Any:
        seen.update(kwargs)
        raise _Stop

    monkeypatch.setattr(omni_core.api, "Omni", fake_omni)
    args = ["generate", "image", "m", "p", "--cache", "teacache", "--cache-option", "threshold=0.2"]
    args += ["--quantization", "fp8", "--no-compile", "-q"]
    result = CliRunner().invoke(cli, args)
    assert isinstance(result.exception, _Stop), result.output
    assert seen["cache"] == {"backend": "teacache", "options": {"threshold": 0.2}}
    assert seen["quantization"] == "fp8" and seen["compile"] is False


def test_integration_serve_passes_acceleration_options(monkeypatch: pytest.MonkeyPatch) -> None:
    import omni_core.commands.serve as serve_cmd
    import omni_core.serving
    from omni_core.cli import cli

    captured: dict[str, Any] = {}

    class _Stop(Exception):
        pass

    def fake_create_app(config: Any) -> Any:
        captured.update(config.options)
        raise _Stop

    monkeypatch.setattr(serve_cmd, "_preflight", lambda config: None)
    monkeypatch.setattr(omni_core.serving, "create_app", fake_create_app)
    runner = CliRunner()
    result = runner.invoke(
        cli,
        ["serve", "m", "--cache", "first-block", "--compile", "--option", "cfg_batch=true"],
    )
    assert isinstance(result.exception, _Stop), result.output
    assert captured == {
        "cfg_batch": True,
        "cache": {"backend": "first-block", "options": {}},
        "compile": True,
    }
    bad = runner.invoke(cli, ["serve", "m", "--quantization", "bogus"])
    assert bad.exit_code == 2 and "unknown quantizer 'bogus'" in bad.output
    twice = runner.invoke(cli, ["serve", "m", "--option", "cache=teacache", "--cache", "teacache"])
    assert twice.exit_code == 2 and "set twice" in twice.output
