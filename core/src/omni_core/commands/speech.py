"""`omni generate speech` and `omni voices`.

``omni generate speech "Hello from omni" -o hello.wav`` speaks with the default speech model
(the Piper voice that ``omni-tts[piper]`` installs; no download). ``--model`` takes a checkpoint
folder, a Hub id, a Piper voice folder or ``.onnx`` file; ``--voice`` one of ``omni voices``.
Text, format, sample rate and speed are checked before the model loads (exit code 2), and the
output file appears only once it is complete (written to a temp file, then renamed).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from omni_core.contract.errors import InvalidRequestError, OmniError


def _load(model: str | None, device: str | None, dtype: str | None, quiet: bool) -> Any:
    from omni_core.api import Omni
    from omni_core.speech import lookup as speech_lookup
    from omni_core.speech.pipeline import SpeechPipeline

    default = speech_lookup.default_speech_spec() if model is None else None
    if model is None and (default is None or not default.default_model):
        speech_lookup.resolve_speech_model(None)  # raises: no installed speech pipeline offers one
    # Omni resolves voice references itself (a voice folder, an alias such as the default
    # model's), so what the lookup adds (the pipeline, its default voice) is its own, not ours.
    ref = model if model is not None else default.default_model  # type: ignore[union-attr]
    if not quiet:
        click.echo(f"loading {ref} ...", err=True)
    omni = Omni(ref, device=device, dtype=dtype)
    from omni_core.commands.options import with_article

    if omni.spec.modality != "speech" or not isinstance(omni.pipeline, SpeechPipeline):
        raise InvalidRequestError(
            f"{model} is served by {omni.spec.name!r}, {with_article(omni.spec.modality)} "
            f"pipeline; use `omni generate {omni.spec.modality}`",
            param="model",
        )
    return omni


@click.command("speech")
@click.argument("text")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, allow_dash=True),
    default="speech.wav",
    show_default=True,
    help="Audio file; '-' writes the encoded stream to stdout.",
)
@click.option(
    "--model",
    help="Checkpoint folder, Hub id, or a speech pipeline's own reference such as a voice "
    "folder (default: the default speech model, see `omni voices`).",
)
@click.option("--voice", help="Voice id (see `omni voices`).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["wav", "pcm", "flac", "mp3"], case_sensitive=False),
    help="Output format (default: from the file suffix, else wav).",
)
@click.option("--sample-rate", type=int, help="Output sample rate in Hz (default: the model's).")
@click.option(
    "--speed",
    type=click.FloatRange(0.25, 4.0),
    default=1.0,
    show_default=True,
    help="Speaking rate (pitch is kept).",
)
@click.option("--stream", is_flag=True, help="Write audio as it is generated.")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), help="Sampling seed.")
@click.option(
    "--extra",
    "extras",
    multiple=True,
    metavar="KEY=VALUE",
    help="Pipeline extra (repeatable); VALUE is parsed as JSON when it can be.",
)
@click.option(
    "--instructions",
    help="Style instructions / a voice description (models that take them; others refuse).",
)
@click.option("--language", help="Language to speak ('Auto' or one the model lists).")
@click.option(
    "--ref-audio",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Clone the voice of this audio file (models that clone voices).",
)
@click.option("--ref-text", help="The transcript of --ref-audio.")
@click.option(
    "--speaker",
    "speakers",
    multiple=True,
    metavar="LABEL=VOICE",
    help="A multi-speaker script's speaker and its voice (repeatable): LABEL as the script "
    "names it, VOICE a voice id or an audio file to clone (models that speak scripts).",
)
@click.option("--device", help="torch device (default: the platform's).")
@click.option("--dtype", help="bfloat16, float16 or float32.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
def generate_speech(
    text: str,
    output: str,
    model: str | None,
    voice: str | None,
    fmt: str | None,
    sample_rate: int | None,
    speed: float,
    stream: bool,
    seed: int | None,
    extras: tuple[str, ...],
    instructions: str | None,
    language: str | None,
    ref_audio: Path | None,
    ref_text: str | None,
    speakers: tuple[str, ...],
    device: str | None,
    dtype: str | None,
    quiet: bool,
) -> None:
    """Speak TEXT and write it to --output (wav, pcm, flac or mp3)."""
    from omni_core.commands.options import parse_extras
    from omni_core.media import audio as codecs
    from omni_core.speech import pipeline as speech_base

    # Everything checkable without the model, first.
    to_stdout = output == "-"
    try:
        fmt = (fmt or "wav").lower() if to_stdout else codecs.format_for_path(output, fmt)
    except InvalidRequestError as exc:
        raise click.BadParameter(exc.message, param_hint="--format/--output") from None
    try:
        codecs.check_sample_rate(sample_rate)
        if sample_rate is not None:
            codecs.check_format(fmt, sample_rate)
    except InvalidRequestError as exc:
        raise click.BadParameter(exc.message, param_hint="--sample-rate") from None
    speech_base.check_text(text)
    kwargs: dict[str, Any] = {"speed": speed, **parse_extras(extras)}
    named = (
        ("voice", voice),
        ("sample_rate", sample_rate),
        ("seed", seed),
        ("instructions", instructions),
        ("language", language),
    )
    for key, value in named:
        if value is not None:
            kwargs[key] = value
    if ref_text is not None and ref_audio is None:
        raise click.BadParameter("give it with --ref-audio", param_hint="--ref-text")
    if ref_audio is not None:
        from omni_core.contract.types import ReferenceVoice
        from omni_core.speech.voices import decode_reference

        samples, rate = decode_reference(ref_audio.read_bytes(), param="ref_audio")
        kwargs["reference"] = ReferenceVoice(audio=samples, sample_rate=rate, transcript=ref_text)
    if speakers:
        kwargs["speakers"] = _speakers(speakers)

    omni = _load(model, device, dtype, quiet)
    request = omni.request(text, **kwargs)  # voice, extras: checked before any compute
    started = time.perf_counter()
    first: float | None = None
    rate = 0
    samples = 0
    sink, tmp = _open_sink(output) if stream or to_stdout else (None, None)
    encoder: Any = None
    parts: list[Any] = []
    try:
        for chunk in omni.pipeline.stream(request):
            if first is None:  # the output rate is known from the first chunk on
                first = time.perf_counter() - started
                rate = chunk.sample_rate
                _check_mp3(fmt, rate)
                if sink is not None:
                    encoder = codecs.StreamEncoder(fmt, rate)
            samples += len(chunk.samples)
            if sink is None:
                parts.append(chunk.samples)
            else:
                sink.write(encoder.encode(chunk.samples))
                sink.flush()
        if samples == 0:
            raise InvalidRequestError("the model produced no audio", param="input")
        if sink is None:
            import numpy as np

            codecs.write_audio(output, np.concatenate(parts).astype(np.float32), rate, fmt)
        else:
            sink.write(encoder.close())
            sink.flush()
            if tmp is not None:
                sink.close()
                codecs.publish_file(tmp, Path(output))
    except BaseException:
        if tmp is not None:
            sink.close()
            tmp.unlink(missing_ok=True)
        raise
    elapsed = time.perf_counter() - started
    seconds = samples / rate
    if not quiet:
        click.echo(
            f"wrote {'stdout' if to_stdout else output} ({seconds:.2f} s at {rate} Hz, {fmt}; "
            f"first audio after {first or 0.0:.3f} s; real-time factor "
            f"{elapsed / max(seconds, 1e-9):.3f})",
            err=True,
        )


def _speakers(given: tuple[str, ...]) -> dict[str, Any]:
    """``--speaker LABEL=VOICE`` values -> the request's ``speakers`` (an existing file is a
    voice to clone, anything else a voice id; the model checks labels and voices)."""
    out: dict[str, Any] = {}
    for item in given:
        label, sep, voice = item.partition("=")
        if not sep or not label.strip() or not voice.strip():
            raise click.BadParameter(f"{item!r}: expected LABEL=VOICE", param_hint="--speaker")
        if label.strip() in out:
            raise click.BadParameter(f"{label.strip()!r} given twice", param_hint="--speaker")
        path = Path(voice)
        if path.is_file():
            from omni_core.contract.types import ReferenceVoice
            from omni_core.speech.voices import decode_reference

            samples, rate = decode_reference(path.read_bytes(), param="speakers")
            out[label.strip()] = ReferenceVoice(audio=samples, sample_rate=rate)
        else:
            out[label.strip()] = voice.strip()
    return out


def _check_mp3(fmt: str, rate: int | None) -> None:
    from omni_core.media import audio as codecs

    if fmt == "mp3" and rate is not None and rate not in codecs.MP3_SAMPLE_RATES:
        raise click.BadParameter(
            f"mp3 cannot carry {rate} Hz; pass --sample-rate", param_hint="--sample-rate"
        )


def _open_sink(output: str) -> tuple[Any, Path | None]:
    """stdout, or a temp file beside ``output`` that is renamed into place when complete."""
    if output == "-":
        return sys.stdout.buffer, None
    import tempfile

    target = Path(output)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile(
        dir=target.parent, prefix=f".{target.name}.", suffix=".part", delete=False
    )
    return handle, Path(handle.name)


@click.command("voices")
@click.option("--model", help="List this model's voices (loads it).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def voices(model: str | None, as_json: bool) -> None:
    """List the voices of the installed speech pipelines (or of one model with --model).

    Without --model: the default voice model's voices, and for every other speech pipeline the
    voices it offers on any checkpoint (or a note that they depend on the checkpoint).
    """
    import json

    from omni_core.contract.errors import ModelNotFoundError
    from omni_core.contract.host import get_registry
    from omni_core.speech import lookup as speech_lookup

    default = speech_lookup.default_speech_spec()
    specs = sorted(
        (s for s in get_registry().pipelines.values() if s.modality == "speech"),
        key=lambda s: (s != default, s.name),
    )
    if not specs:
        raise OmniError("no speech pipeline is installed (pip install omni-tts)")
    rows: list[dict[str, Any]] = []
    notes: dict[str, str] = {}

    def add(pipeline: str, source: str | None, listed: list[Any]) -> None:
        for v in listed:
            rows.append(
                {
                    "id": v.id,
                    "name": v.name or v.id,
                    "language": v.language,
                    "description": v.description,
                    "pipeline": pipeline,
                    "model": source,
                }
            )

    if model is not None:
        omni = _load(model, None, None, quiet=True)
        add(omni.spec.name, model, omni.pipeline.voices())
    else:
        for spec in specs:
            if spec == default:
                try:
                    omni = _load(None, None, None, quiet=True)
                except ModelNotFoundError as exc:
                    notes[spec.name] = str(exc)
                    continue
                add(spec.name, spec.default_model, omni.pipeline.voices())
                continue
            known = spec.load().known_voices()
            if known is None:
                notes[spec.name] = "voices depend on the checkpoint: pass --model"
            else:
                add(spec.name, None, known)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for spec in specs:
        mine = [r for r in rows if r["pipeline"] == spec.name]
        if not mine and spec.name not in notes:
            continue
        source = model or (mine[0]["model"] if mine and mine[0]["model"] else "")
        click.echo(f"{spec.name}{f' ({source})' if source else ''}:")
        for row in mine:
            lang = f" [{row['language']}]" if row["language"] else ""
            click.echo(f"  {row['id']}{lang}  {row['description']}".rstrip())
        if spec.name in notes:
            click.echo(f"  ({notes[spec.name]})")
