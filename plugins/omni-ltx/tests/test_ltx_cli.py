"""The ``omni`` command line on LTX-2 (in this process, through the test kit's ``run_cli``):
``omni generate video`` writes the video and the sound ``Omni`` renders (an MP4 with an AAC
track), a frame count the model cannot make is one line and exit 2 before any weights load,
and ``omni list-plugins`` names the plugin with its version."""

from __future__ import annotations

import numpy as np

from omni_core.testing import read_video, read_video_sound, run_cli

PROMPT = "a red cat walks on the grass"


def test_generate_video_writes_the_video_and_sound_omni_renders(
    ltx_checkpoint, ltx_model, tmp_path, blocks
) -> None:
    import av

    out = tmp_path / "cat.mp4"
    args = ["--size", "64x32", "--frames", "5", "--steps", "2", "--seed", "11", "--extra", "fps=4"]
    args += ["--guidance", "4.0", "--negative-prompt", "blurry"]
    args += ["--dtype", "float32", "--device", "cpu", "-o", str(out)]
    result = run_cli("generate", "video", str(ltx_checkpoint), PROMPT, *args)
    assert result.exit_code == 0, result.output
    expected = ltx_model.generate(
        PROMPT,
        width=64,
        height=32,
        num_frames=5,
        num_inference_steps=2,
        seed=11,
        guidance_scale=4.0,
        negative_prompt="blurry",
        extras={"fps": 4},
    )
    written = read_video(out)
    assert written.shape == expected.video.shape == (5, 32, 64, 3)
    assert np.abs(blocks(written) - blocks(expected.video)).mean() < 10  # H.264 (serve test)
    with av.open(str(out)) as container:
        assert container.streams.video[0].average_rate == 4  # the fps extra plays the MP4 too
    sound, rate = read_video_sound(out)  # type: ignore[misc]
    n = len(expected.audio)
    assert rate == expected.sample_rate and len(sound) >= n
    assert np.corrcoef(sound[:n, 0], expected.audio[:, 0])[0, 1] > 0.95


def test_bad_frame_count_is_one_line_and_exit_2(ltx_checkpoint, tmp_path) -> None:
    result = run_cli(
        "generate", "video", str(ltx_checkpoint), "x", "--frames", "6",
        "--size", "32x32", "-o", str(tmp_path / "x.mp4"),
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "2k+1" in result.output and "Traceback" not in result.output


def test_list_plugins_names_the_family() -> None:
    from omni_ltx import __version__

    result = run_cli("list-plugins")
    assert result.exit_code == 0, result.output
    assert "omni-ltx" in result.output and __version__ in result.output
    assert "ltx-2-t2v" in result.output


def test_the_tiny_benchmark_workload_matches_diffusers(tmp_path) -> None:
    """``omni bench pipeline --workload tiny-ltx-2``: the workload builds, both modes run and
    omni's video equals diffusers' (PSNR of the frames)."""
    import json

    out = tmp_path / "bench.json"
    args = ["--workload", "tiny-ltx-2", "--reps", "0", "--device", "cpu"]
    args += ["--work-dir", str(tmp_path / "work"), "--out", str(out)]
    result = run_cli("bench", "pipeline", *args)
    assert result.exit_code == 0, result.output
    rows = {row["mode"]: row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"diffusers", "omni"}
    assert rows["omni"]["psnr_vs_diffusers_db"] >= 40, rows["omni"]
