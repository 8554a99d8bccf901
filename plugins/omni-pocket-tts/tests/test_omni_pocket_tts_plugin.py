"""omni-pocket-tts is discoverable, imports omni-core through its faces only, and is listed."""

from __future__ import annotations

import json
from pathlib import Path

from omni_core.testing import assert_imports_only_faces, assert_plugin_discoverable, run_cli


def test_my_plugin_is_discoverable_and_its_specs_validate() -> None:
    # Loads the installed entry point in strict mode (right plugin API, known hooks, no name
    # clashes) and checks that every "module:attr" the specs point at exists.
    registry = assert_plugin_discoverable("omni-pocket-tts")
    spec = registry.pipelines["pocket-tts"]
    assert spec.plugin == "omni-pocket-tts"
    assert spec.architectures == ("PocketTTSForConditionalGeneration",)
    assert spec.tasks == ("tts",)


def test_the_plugin_imports_omni_core_through_its_faces_only() -> None:
    import omni_pocket_tts

    package = Path(omni_pocket_tts.__file__).parent
    runtime = [p for p in package.glob("*.py") if p.stem != "testing"]
    assert {p.stem for p in runtime} >= {"plugin", "pipeline", "stages", "layout", "bench"}
    assert_imports_only_faces(runtime, test_kit=False)
    assert_imports_only_faces([package / "testing.py", *Path(__file__).parent.glob("*.py")])


def test_list_plugins_names_omni_pocket_tts_with_its_version() -> None:
    from omni_pocket_tts import __version__

    result = run_cli("list-plugins")
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if "omni-pocket-tts" in line)
    assert __version__ in line and "pocket-tts" in line.replace("omni-pocket-tts", "")


def test_the_codec_and_voices_are_where_the_checkpoint_names_them(tmp_path: Path) -> None:
    """The codec comes from ``processor_config.json``'s ``audio_tokenizer`` (the tiny
    checkpoint's ``audio_tokenizer/`` folder), else ``audio_tokenizer_config.json``; the
    built-in voices are ``voices/*.safetensors``."""
    from omni_pocket_tts.layout import builtin_voices, codec_name

    assert codec_name(tmp_path) is None and builtin_voices(tmp_path) == {}
    entry = {"audio_tokenizer_class": "PocketTTSAudioTokenizerModel"}
    entry["audio_tokenizer_name_or_path"] = "org/codec"
    (tmp_path / "audio_tokenizer_config.json").write_text(json.dumps(entry))
    assert codec_name(tmp_path) == "org/codec"
    processor = {"audio_tokenizer": {**entry, "audio_tokenizer_name_or_path": "audio_tokenizer"}}
    (tmp_path / "processor_config.json").write_text(json.dumps(processor))
    assert codec_name(tmp_path) == "audio_tokenizer"
    (tmp_path / "voices").mkdir()
    for name in ("marius", "alba"):
        (tmp_path / "voices" / f"{name}.safetensors").write_bytes(b"")
    assert list(builtin_voices(tmp_path)) == ["alba", "marius"]
