"""``omni generate audio`` on Stable Audio (in this process, through the test kit's
``run_cli``): the WAV holds the clip ``Omni`` renders for the same request (and so diffusers'
clip), and each bad input is one line and a nonzero exit, before any weights load where the
checkpoint can tell."""

from __future__ import annotations

import io
import wave

import numpy as np
import pytest

from omni_core.testing import run_cli

PROMPT = "a dog barking in the rain"


def _read_wav(path) -> tuple[np.ndarray, int]:
    with wave.open(io.BytesIO(path.read_bytes())) as handle:
        rate, channels = handle.getframerate(), handle.getnchannels()
        frames = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
    return frames.reshape(-1, channels).astype(np.float32) / 32767.0, rate


def test_generate_audio_writes_the_clip_omni_renders(audio_checkpoint, audio_model, tmp_path):
    out = tmp_path / "clips" / "dog.wav"
    args = ["--duration", "0.2", "--start", "0.02", "--steps", "3", "--seed", "4"]
    args += ["--guidance", "4.0", "--negative-prompt", "noise", "-o", str(out)]
    args += ["--device", "cpu", "--dtype", "float32", "-q"]
    result = run_cli("generate", "audio", str(audio_checkpoint), PROMPT, *args)
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output and "16000 Hz" in result.output
    expected = audio_model.generate(
        PROMPT,
        duration_s=0.2,
        audio_start_s=0.02,
        num_inference_steps=3,
        seed=4,
        guidance_scale=4.0,
        negative_prompt="noise",
    )
    written, rate = _read_wav(out)
    assert rate == expected.sample_rate == 16000
    assert written.shape == expected.audio.shape == (3200, 2)
    assert expected.audio.std() > 0.05  # not silence: the comparison proves something
    # 16-bit WAV: within one quantization step of the float clip
    assert np.abs(written - np.clip(expected.audio, -1, 1)).max() <= 1.5 / 32767


@pytest.mark.parametrize(
    ("args", "words", "code"),
    [
        (["--duration", "5"], "at most 0.256 s", 2),  # the checkpoint's limit, before loading
        (["--duration", "0"], "--duration", 2),
        (["-o", "clip.ogg"], "must end in .wav, .flac or .mp3", 2),
        (["-o", "clips/"], "is a folder", 2),
        (["--extra", "no_such_knob=1"], "no_such_knob", 2),
    ],
    ids=["too-long", "zero", "suffix", "folder", "extra"],
)
def test_bad_input_is_one_line_and_nonzero(audio_checkpoint, tmp_path, args, words, code) -> None:
    base = ["generate", "audio", str(audio_checkpoint), PROMPT, "--steps", "2"]
    result = run_cli(*base, "-o", str(tmp_path / "x.wav"), *args)
    assert result.exit_code == code, result.output
    assert words in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x.wav").exists()


def test_an_empty_prompt_and_the_wrong_command_are_refused(audio_checkpoint, tmp_path) -> None:
    result = run_cli(
        "generate", "audio", str(audio_checkpoint), "  ", "-o", str(tmp_path / "a.wav")
    )
    assert result.exit_code == 2 and "prompt is empty" in result.output
    # the other way round: a text-to-audio model asked for an image names the right command
    result = run_cli(
        "generate", "image", str(audio_checkpoint), PROMPT, "-o", str(tmp_path / "a.png")
    )
    assert result.exit_code != 0 and "omni generate audio" in result.output
    assert "Traceback" not in result.output


def test_the_tiny_benchmark_workload_matches_diffusers(tmp_path) -> None:
    """``omni bench pipeline --workload tiny-stable-audio``: the workload builds, both modes run
    on the same folder and omni's clip equals diffusers' (PSNR of the 8-bit waveform), and the
    real-size workload is registered beside it."""
    import json

    from omni_core.testing import assert_plugin_discoverable

    assert "stable-audio-open-10s" in assert_plugin_discoverable("omni-stable-audio").benchmarks
    out = tmp_path / "bench.json"
    args = ["--workload", "tiny-stable-audio", "--reps", "0", "--device", "cpu"]
    args += ["--work-dir", str(tmp_path / "work"), "--out", str(out)]
    result = run_cli("bench", "pipeline", *args)
    assert result.exit_code == 0, result.output
    rows = {row["mode"]: row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"diffusers", "omni"}
    assert rows["diffusers"]["output_shape"] == [1, 3200, 2]  # 0.2 s of stereo at 16 kHz
    assert rows["diffusers"]["output_std"] > 5, rows["diffusers"]
    assert rows["omni"]["psnr_vs_diffusers_db"] >= 40, rows["omni"]
