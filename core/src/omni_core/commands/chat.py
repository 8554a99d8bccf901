"""`omni generate chat MODEL PROMPT`: one answer of a chat model, its text streamed to stdout.

``--image`` / ``--audio`` / ``--video`` add media to the user turn, ``--system`` a system
prompt; ``-o answer.wav`` (or .mp3, .flac, .pcm) asks an omni model for the spoken answer too
and writes it once complete. Files, formats and the model's kind are checked before any weight
loads (exit code 2, one line); ``--option enable_audio_output=false``-style loading options go
to the pipeline as ``omni serve --option`` sends them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from omni_core.contract.errors import InvalidRequestError

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


def _media(images: tuple[Path, ...], audios: tuple[Path, ...], videos: tuple[Path, ...]) -> list:
    """The media parts of the user turn, decoded with the server's bounds."""
    from omni_core.commands.generate import _load_images
    from omni_core.contract.messages import ChatPart
    from omni_core.serving import chat_media
    from omni_core.serving.config import DEFAULT_MAX_UPLOAD_PIXELS

    parts = [ChatPart(kind="image", image=image) for image in _load_images(images)]
    for path in audios:
        audio, rate = chat_media.decode_audio(path.read_bytes(), f"--audio {path}")
        parts.append(ChatPart(kind="audio", audio=audio, sample_rate=rate))
    for path in videos:
        video = chat_media.decode_video(
            path.read_bytes(), f"--video {path}", DEFAULT_MAX_UPLOAD_PIXELS
        )
        parts.append(
            ChatPart(
                kind="video",
                video=video.frames,
                fps=video.fps,
                audio=video.audio,
                sample_rate=video.sample_rate,
            )
        )
    return parts


@click.command("chat")
@click.argument("model")
@click.argument("prompt")
@click.option("--system", help="A system prompt.")
@click.option("--image", "images", multiple=True, type=_FILE, help="An image (repeatable).")
@click.option("--audio", "audios", multiple=True, type=_FILE, help="An audio file (repeatable).")
@click.option("--video", "videos", multiple=True, type=_FILE, help="A video file (repeatable).")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the spoken answer here (.wav, .mp3, .flac, .pcm); omni models only.",
)
@click.option("--voice", help="The voice of the spoken answer (see GET /v1/audio/voices).")
@click.option("--max-tokens", type=click.IntRange(1, 32768), help="Longest answer, in tokens.")
@click.option("--temperature", type=click.FloatRange(0, 2), help="0: greedy.")
@click.option("--top-p", type=click.FloatRange(0, 1, min_open=True))
@click.option("--top-k", type=click.IntRange(0, 100000), help="0: every token.")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), help="Sampling seed.")
@click.option("--extra", "extras", multiple=True, metavar="KEY=VALUE", help="Pipeline extra.")
@click.option(
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Loading option of the pipeline (repeatable), e.g. enable_audio_output=false.",
)
@click.option("--pipeline", help="Use this registered pipeline, not the detected one.")
@click.option("--device", help="torch device (default: the platform's).")
@click.option("--dtype", help="bfloat16, float16 or float32.")
@click.option("--quiet", "-q", is_flag=True, help="Print the answer only.")
def generate_chat(
    model: str,
    prompt: str,
    system: str | None,
    images: tuple[Path, ...],
    audios: tuple[Path, ...],
    videos: tuple[Path, ...],
    output: Path | None,
    voice: str | None,
    extras: tuple[str, ...],
    options: tuple[str, ...],
    pipeline: str | None,
    device: str | None,
    dtype: str | None,
    quiet: bool,
    **sampling: Any,
) -> None:
    """Answer PROMPT with the chat model MODEL (a folder or a Hub id)."""
    from omni_core.api import Omni, check_load_options, locate_model
    from omni_core.commands.options import key_values, parse_extras, with_article
    from omni_core.contract.collect import ChatCollector
    from omni_core.contract.messages import ChatMessage, ChatPart
    from omni_core.media import audio as codecs

    fmt = None
    if output is not None:
        try:
            fmt = codecs.format_for_path(output)
        except (ValueError, InvalidRequestError) as exc:
            why = exc.message if isinstance(exc, InvalidRequestError) else str(exc)
            hint = "--output"
            raise click.BadParameter(
                why.removeprefix("response_format: "), param_hint=hint
            ) from None
    messages = [ChatMessage.text("system", system)] if system else []
    user = [ChatPart(kind="text", text=prompt), *_media(images, audios, videos)]
    messages.append(ChatMessage(role="user", parts=user))
    loading = key_values(options, "--option")
    location = locate_model(model, pipeline)
    spec = location.spec
    if spec.modality != "chat":
        raise InvalidRequestError(
            f"{model} is served by {spec.name!r}, {with_article(spec.modality)} pipeline; use "
            f"`omni generate {spec.modality}`",
            param="model",
        )
    check_load_options(spec, loading)
    if not quiet:
        click.echo(f"loading {model} with {spec.name} ...", err=True)
    with Omni(location.path, pipeline=spec.name, device=device, dtype=dtype, **loading) as omni:
        collector = ChatCollector()
        fields = {k: v for k, v in sampling.items() if v is not None}
        modalities = ["text", "audio"] if output is not None else ["text"]
        # the text streams to stdout either way; the file is written whole (stream=False: a
        # model whose codec is not causal decodes the whole answer, as its reference does)
        for delta in omni.chat_stream(
            messages,
            modalities=modalities,
            voice=voice,
            extras=parse_extras(extras),
            stream=False,
            **fields,
        ):
            collector.add(delta)
            if delta.text:
                click.echo(delta.text, nl=False)
                sys.stdout.flush()
        click.echo()
        result = collector.result()
    usage = result.info["usage"]
    if output is not None:
        if result.audio is None or result.sample_rate is None:
            raise click.ClickException("the model answered without audio")
        codecs.write_audio(output, result.audio, result.sample_rate, fmt)
        seconds = len(result.audio) / result.sample_rate
        if not quiet:
            click.echo(f"wrote {output} ({seconds:.2f} s at {result.sample_rate} Hz)", err=True)
    if not quiet:
        click.echo(
            f"{usage.completion_tokens} tokens ({result.info['finish_reason']}), "
            f"{usage.prompt_tokens} prompt tokens, {result.timings['generate_s']:.2f} s",
            err=True,
        )
