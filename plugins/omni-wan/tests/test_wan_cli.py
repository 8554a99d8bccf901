"""`omni generate video` on Wan: a real MP4, and bad options rejected before any weights load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from omni_core.testing import read_video, run_cli


@pytest.fixture
def no_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the CLI gets as far as loading weights."""
    from omni_core import Omni

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("weights were loaded before the option was rejected")

    monkeypatch.setattr(Omni, "__init__", refuse)


def run(*args: str) -> Any:
    return run_cli("generate", *args)


BAD = [
    ("t2v", ["--size", "30x16"], "width 30 is not divisible by 16"),
    ("t2v", ["--height", "24", "--width", "32"], "height 24 is not divisible by 16"),
    ("ti2v", ["--size", "48x32"], "width 48 is not divisible by 32"),
    ("t2v", ["--frames", "8"], "must be 4k+1"),
    ("i2v", ["--size", "32x16"], "give exactly one conditioning image"),
    ("t2v", ["--extra", "foo=1"], "unknown extra 'foo'"),
    ("t2v", ["--extra", "guidance_scale_2=3"], "guidance_scale_2 is only used by two-expert"),
    ("t2v", ["--extra", "flow_shift=-1"], "flow_shift"),
    ("t2v", ["--extra", "nonsense"], "is not KEY=VALUE"),
    ("t2v", ["--size", "big"], "is not WIDTHxHEIGHT"),
    ("t2v", ["--size", "32x16", "--height", "16"], "not both"),
    ("t2v", ["--steps", "0"], "--steps"),
    ("t2v", ["--attention-backend", "no-such-kernel"], "unknown attention backend"),
    ("t2v", ["--dtype", "float13"], "unknown dtype"),
]


@pytest.mark.parametrize(("variant", "args", "message"), BAD)
def test_wan_cli_rejects_bad_options(
    variant: str, args: list[str], message: str, tiny_wan: Any, tmp_path: Path, no_load: None
) -> None:
    result = run("video", str(tiny_wan(variant)), "a cat", *args, "-o", str(tmp_path / "x.mp4"))
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "x.mp4").exists()


def test_wan_cli_rejects_image_for_text_only_model(
    tiny_wan: Any, tmp_path: Path, cond_image: Any, no_load: None
) -> None:
    image = tmp_path / "in.png"
    cond_image.save(image)
    result = run("video", str(tiny_wan("t2v")), "a cat", "--image", str(image))
    assert result.exit_code == 2
    assert "takes no image" in result.output


def test_wan_cli_rejects_image_command_for_video_model(tiny_wan: Any, no_load: None) -> None:
    result = run("image", str(tiny_wan("t2v")), "a cat")
    assert result.exit_code == 2
    assert "omni generate video" in result.output


def test_wan_cli_unknown_checkpoint_lists_pipelines(tmp_path: Path, no_load: None) -> None:
    (tmp_path / "config.json").write_text('{"architectures": ["NoSuchModel"]}')
    result = run("video", str(tmp_path), "a cat")
    assert result.exit_code == 2
    assert "no installed pipeline serves NoSuchModel" in result.output
    assert "wan-t2v" in result.output


def test_wan_cli_writes_mp4(tiny_wan: Any, tmp_path: Path, cond_image: Any) -> None:
    image = tmp_path / "in.png"
    cond_image.save(image)
    out = tmp_path / "clip.mp4"
    result = run(
        "video",
        str(tiny_wan("ti2v")),
        "a cat walks",
        "--size",
        "64x32",
        "--frames",
        "5",
        "--steps",
        "2",
        "--seed",
        "7",
        "--image",
        str(image),
        "--extra",
        "fps=8",
        "--dtype",
        "float32",
        "--device",
        "cpu",
        "-o",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert "denoising" in result.output and f"wrote {out}" in result.output
    frames = read_video(out)
    assert frames.shape == (5, 32, 64, 3)
    import av

    with av.open(str(out)) as container:
        assert container.streams.video[0].average_rate == 8


def test_wan_cli_rejects_bad_parallel_layout(tiny_wan: Any, tmp_path: Path) -> None:
    """Checked before any worker is spawned: the tiny model has 2 attention heads."""
    result = run(
        "video",
        str(tiny_wan("t2v")),
        "a cat",
        "--size",
        "64x64",
        "--ulysses-degree",
        "4",
        "-o",
        str(tmp_path / "x.mp4"),
    )
    assert result.exit_code == 2, result.output
    assert "does not divide" in result.output
