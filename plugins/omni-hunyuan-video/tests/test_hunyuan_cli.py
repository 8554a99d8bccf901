"""The ``omni`` command line on HunyuanVideo-1.5 (in this process, through the test kit's
``run_cli``): ``omni generate video`` writes the video ``Omni`` renders (an MP4 at ``--fps``),
a frame count the model cannot make is one line and exit 2 before any weights load, and
``omni list-plugins`` names the plugin with its version."""

from __future__ import annotations

import numpy as np

from omni_core.testing import read_video, run_cli

PROMPT = 'a shop sign that says "OPEN"'


def test_generate_video_writes_the_video_omni_renders(
    hunyuan_checkpoint, hunyuan_model, tmp_path, blocks
):
    import av

    out = tmp_path / "sign.mp4"
    args = ["--size", "48x32", "--frames", "5", "--steps", "2", "--seed", "11", "--fps", "8"]
    args += ["--guidance", "3.0", "--negative-prompt", "blurry"]
    args += ["--dtype", "float32", "--device", "cpu", "-o", str(out)]
    result = run_cli("generate", "video", str(hunyuan_checkpoint), PROMPT, *args)
    assert result.exit_code == 0, result.output
    expected = hunyuan_model.generate(
        PROMPT,
        width=48,
        height=32,
        num_frames=5,
        num_inference_steps=2,
        seed=11,
        guidance_scale=3.0,
        negative_prompt="blurry",
    ).video
    written = read_video(out)
    assert written.shape == expected.shape == (5, 32, 48, 3)
    # H.264 keeps the low frequencies of the tiny model's texture-like frames (see the serve test).
    assert np.abs(blocks(written) - blocks(expected)).mean() < 3
    with av.open(str(out)) as container:
        assert container.streams.video[0].average_rate == 8


def test_bad_frame_count_is_one_line_and_exit_2(hunyuan_checkpoint, tmp_path) -> None:
    result = run_cli(
        "generate", "video", str(hunyuan_checkpoint), "x", "--frames", "6",
        "--size", "32x32", "-o", str(tmp_path / "x.mp4"),
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "4k+1" in result.output and "Traceback" not in result.output


def test_list_plugins_names_the_family() -> None:
    from omni_hunyuan_video import __version__

    result = run_cli("list-plugins")
    assert result.exit_code == 0, result.output
    assert f"omni-hunyuan-video {__version__}" in result.output or (
        "omni-hunyuan-video" in result.output and __version__ in result.output
    )
    assert "hunyuan-video-1.5-t2v" in result.output


def test_the_tiny_benchmark_workload_matches_diffusers(tmp_path) -> None:
    """``omni bench pipeline --workload tiny-hunyuan-video-1.5``: the workload builds, both
    modes run on the same folder and omni's video equals diffusers' (PSNR of the frames), and
    the real-size workload is registered beside it."""
    import json

    from omni_core.testing import assert_plugin_discoverable

    registry = assert_plugin_discoverable("omni-hunyuan-video")
    assert "hunyuan-video-1.5-480p-33f" in registry.benchmarks
    out = tmp_path / "bench.json"
    args = ["--workload", "tiny-hunyuan-video-1.5", "--reps", "0", "--device", "cpu"]
    args += ["--work-dir", str(tmp_path / "work"), "--out", str(out)]
    result = run_cli("bench", "pipeline", *args)
    assert result.exit_code == 0, result.output
    rows = {row["mode"]: row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"diffusers", "omni"}
    assert rows["diffusers"]["output_std"] > 5, rows["diffusers"]
    assert rows["omni"]["psnr_vs_diffusers_db"] >= 40, rows["omni"]
