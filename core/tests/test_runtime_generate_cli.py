"""`omni generate`: option parsing and the lazy speech subcommand (no model needed)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from omni_core.commands.generate import GenerateGroup, parse_extras, parse_size


def test_runtime_parse_size_and_extras() -> None:
    assert parse_size("832x480", None, None) == (480, 832)
    assert parse_size(None, 16, 32) == (16, 32)
    with pytest.raises(click.UsageError):
        parse_size("832x480", 480, None)
    with pytest.raises(click.BadParameter):
        parse_size("832", None, None)
    assert parse_extras(("a=1", "b=true", "c=[1, 2]", "d=hello", "flow-shift=3.5")) == {
        "a": 1,
        "b": True,
        "c": [1, 2],
        "d": "hello",
        "flow_shift": 3.5,
    }
    with pytest.raises(click.BadParameter):
        parse_extras(("novalue",))


def test_runtime_generate_help_and_missing_speech_module() -> None:
    from omni_core.cli import cli

    result = CliRunner().invoke(cli, ["generate", "--help"])
    assert result.exit_code == 0
    assert "video" in result.output and "image" in result.output and "speech" in result.output
    assert "audio" in result.output

    @click.group(cls=GenerateGroup, lazy_commands={"speech": "no_such_module_xyz:cmd"})
    def group() -> None:
        pass

    @group.command("video")
    def video() -> None:
        click.echo("video ran")

    runner = CliRunner()
    assert runner.invoke(group, ["video"]).output == "video ran\n"
    broken = runner.invoke(group, ["speech", "hello"])
    assert broken.exit_code == 1
    assert "not available here" in broken.output


def test_runtime_generate_rejects_bad_output_suffix(tmp_path: object) -> None:
    from omni_core.cli import cli

    result = CliRunner().invoke(cli, ["generate", "video", "m", "p", "-o", "x.gif"])
    assert result.exit_code == 2 and ".mp4" in result.output
    result = CliRunner().invoke(cli, ["generate", "image", "m", "p", "-o", "x.gif"])
    assert result.exit_code == 2 and ".png" in result.output
    result = CliRunner().invoke(cli, ["generate", "audio", "m", "p", "-o", "x.ogg"])
    assert result.exit_code == 2 and ".wav" in result.output


@pytest.mark.parametrize(
    ("kind", "suffix"), [("video", ".mp4"), ("image", ".png"), ("audio", ".wav")]
)
def test_a_folder_as_output_is_one_line_and_exit_2(kind: str, suffix: str, tmp_path) -> None:
    """Every `omni generate` writes one file: a folder (existing, named like a file, or a path
    ending in /) is refused before anything loads, naming a file to give instead."""
    from omni_core.cli import cli

    existing = tmp_path / "out"
    existing.mkdir()
    named_like_a_file = tmp_path / f"clip{suffix}"
    named_like_a_file.mkdir()
    for output in (f"{existing}/", str(existing), str(named_like_a_file), f"{tmp_path}/new/"):
        result = CliRunner().invoke(cli, ["generate", kind, "m", "p", "-o", output])
        assert result.exit_code == 2, result.output
        message = result.output.strip().splitlines()[-1]
        assert "is a folder; name a file in it" in message and f"out{suffix}" in message
    assert not (tmp_path / "new").exists() and not any(existing.iterdir())


@pytest.mark.parametrize("size", ["0x0", "0x64", "64x9000"])
def test_a_size_out_of_bounds_says_the_bound_the_server_says(size: str) -> None:
    with pytest.raises(click.BadParameter, match="between 1 and 8192"):
        parse_size(size, None, None)


def test_messages_read_right() -> None:
    from omni_core.cli import cli
    from omni_core.commands.options import with_article

    assert [with_article(m) for m in ("image", "video", "speech", "chat")] == [
        "an image",
        "a video",
        "a speech",
        "a chat",
    ]
    top = CliRunner().invoke(cli, ["--help"])
    assert top.exit_code == 0 and "chat" in top.output
