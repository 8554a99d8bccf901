"""`omni generate audio`: text to audio (sound effects, music) with any installed pipeline of
modality ``audio`` (the ``t2a`` task; e.g. omni-stable-audio), the CLI twin of
``POST /v1/audio/generate``.

``omni generate audio MODEL "rain on a tin roof" -o rain.wav --duration 10`` resolves MODEL to
its pipeline as ``omni generate image|video`` do, checks the request against the checkpoint
before the weights load (exit code 2, one line), and writes the clip atomically in the format
the output's suffix names (wav, flac or mp3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from omni_core.commands.generate import _run
from omni_core.commands.memory_options import memory_options
from omni_core.commands.options import acceleration_options, output_file


@click.command("audio")
@click.argument("model")
@click.argument("prompt")
@click.option(
    "-o",
    "--output",
    default="out.wav",
    show_default=True,
    callback=output_file("audio", (".wav", ".flac", ".mp3")),
    help="Audio file (.wav, .flac or .mp3).",
)
@click.option(
    "--duration",
    "duration_s",
    type=click.FloatRange(0, 3600, min_open=True),
    help="Seconds of audio (default: the model's).",
)
@click.option(
    "--start",
    "audio_start_s",
    type=click.FloatRange(0, 3600),
    help="Where the clip starts in the model's timeline, in seconds (default 0).",
)
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), help="Noise seed.")
@click.option("--steps", type=click.IntRange(1, 1000), help="Denoising steps.")
@click.option("--guidance", type=click.FloatRange(0, 100), help="Guidance scale.")
@click.option("--negative-prompt", help="What to steer away from.")
@click.option(
    "--extra",
    "extras",
    multiple=True,
    metavar="KEY=VALUE",
    help="Pipeline extra (repeatable); VALUE is parsed as JSON when it can be.",
)
@click.option("--pipeline", help="Use this registered pipeline, not the detected one.")
@click.option("--device", help="torch device, e.g. cuda:1 (default: the platform's).")
@click.option("--dtype", help="bfloat16, float16 or float32.")
@click.option("--attention-backend", help="Attention backend for every role.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@acceleration_options
@memory_options
def generate_audio(
    model: str,
    prompt: str,
    output: Path,
    duration_s: float | None,
    audio_start_s: float | None,
    **options: Any,
) -> None:
    """Generate sound or music from PROMPT with MODEL (a folder or a Hub id)."""
    if not prompt.strip():
        raise click.BadParameter("the prompt is empty", param_hint="PROMPT")
    fields = {"duration_s": duration_s, "audio_start_s": audio_start_s}
    result, elapsed = _run(
        "audio",
        model,
        prompt,
        size=None,
        height=None,
        width=None,
        images=(),
        cfg_parallel_size=1,
        ulysses_degree=1,
        fields={k: v for k, v in fields.items() if v is not None},
        **options,
    )
    if result.audio is None or not result.sample_rate:
        raise click.ClickException("the pipeline returned no audio")
    from omni_core.media import audio as codecs

    path = codecs.write_audio(output, result.audio, int(result.sample_rate))
    seconds = codecs.duration_s(result.audio, int(result.sample_rate))
    click.echo(
        f"wrote {path} ({seconds:.2f} s at {result.sample_rate} Hz, seed "
        f"{result.info.get('seed')}, {elapsed:.1f}s)",
        err=True,
    )
