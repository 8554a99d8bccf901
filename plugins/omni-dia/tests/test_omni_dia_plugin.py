"""omni-dia is discoverable, imports omni-core through its faces only, and is listed."""

from __future__ import annotations

from pathlib import Path

from omni_core.testing import assert_imports_only_faces, assert_plugin_discoverable, run_cli


def test_my_plugin_is_discoverable_and_its_specs_validate() -> None:
    # Loads the installed entry point in strict mode (right plugin API, known hooks, no name
    # clashes) and checks that every "module:attr" the specs point at exists.
    registry = assert_plugin_discoverable("omni-dia")
    spec = registry.pipelines["dia"]
    assert spec.plugin == "omni-dia"
    assert spec.architectures == ("DiaForConditionalGeneration",)
    assert spec.tasks == ("tts",)


def test_the_plugin_imports_omni_core_through_its_faces_only() -> None:
    import omni_dia

    package = Path(omni_dia.__file__).parent
    runtime = [p for p in package.glob("*.py") if p.stem != "testing"]
    assert {p.stem for p in runtime} >= {"plugin", "pipeline", "stages", "layout", "bench"}
    assert_imports_only_faces(runtime, test_kit=False)
    assert_imports_only_faces([package / "testing.py", *Path(__file__).parent.glob("*.py")])


def test_list_plugins_names_omni_dia_with_its_version() -> None:
    from omni_dia import __version__

    result = run_cli("list-plugins")
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if "omni-dia" in line)
    assert __version__ in line and "dia" in line.replace("omni-dia", "")


def test_the_codec_is_the_one_the_processor_names(tmp_path: Path) -> None:
    """DAC comes from ``processor_config.json``'s ``audio_tokenizer`` (the tiny checkpoint's
    ``dac/`` folder), else ``audio_tokenizer_config.json``, else the published codec."""
    import json

    from omni_dia.layout import DAC_HUB, codec_name

    assert codec_name(tmp_path) == DAC_HUB == "descript/dac_44khz"
    entry = {"audio_tokenizer_class": "DacModel", "audio_tokenizer_name_or_path": "org/dac"}
    (tmp_path / "audio_tokenizer_config.json").write_text(json.dumps(entry))
    assert codec_name(tmp_path) == "org/dac"
    processor = {"audio_tokenizer": {**entry, "audio_tokenizer_name_or_path": "dac"}}
    (tmp_path / "processor_config.json").write_text(json.dumps(processor))
    assert codec_name(tmp_path) == "dac"


def test_omni_voices_lists_dias_one_voice_without_a_model() -> None:
    result = run_cli("voices")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[lines.index("dia:") + 1].split() == ["default", "[en]"]
