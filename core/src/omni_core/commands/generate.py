"""`omni generate video|image|audio|speech|chat`: one generation from the command line.

Everything that can be checked is checked before weights load (options, sizes, frame counts,
images, extras, through the pipeline's :meth:`~omni_core.contract.pipeline.Pipeline.precheck`),
so a typo costs a second, not a model load; such errors exit with code 2. ``audio`` lives in
:mod:`omni_core.commands.generate_audio`, ``speech`` in :mod:`omni_core.commands.speech` and
``chat`` in :mod:`omni_core.commands.chat`, each imported only when used.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import click

from omni_core.cli import LazyGroup
from omni_core.commands.memory_options import memory_options
from omni_core.commands.options import (
    acceleration_kwargs,
    acceleration_options,
    check_load_options,
    output_file,
    parse_extras,
    with_article,
)
from omni_core.contract.errors import InvalidRequestError, OmniError

SUBCOMMANDS = {
    "audio": "omni_core.commands.generate_audio:generate_audio",
    "speech": "omni_core.commands.speech:generate_speech",
    "chat": "omni_core.commands.chat:generate_chat",
}
SUBCOMMAND_HELP = {
    "audio": "Generate sound or music from a prompt with a text-to-audio model (WAV/FLAC/MP3).",
    "speech": "Speak text with a speech model (writes WAV/MP3/FLAC).",
    "chat": "Answer a prompt with a chat model (text; speech from omni models).",
}


class GenerateGroup(LazyGroup):
    """Lazy subcommands whose import failure is reported, not fatal to the other subcommands."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_commands and cmd_name not in self.commands:
            module_name, _, attr = self.lazy_commands[cmd_name].partition(":")
            try:
                command = getattr(importlib.import_module(module_name), attr)
            except (ImportError, AttributeError) as exc:
                return _unavailable(cmd_name, exc)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.commands.get(name)
            text = cmd.get_short_help_str(60) if cmd else SUBCOMMAND_HELP.get(name, "")
            rows.append((name, text))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _unavailable(name: str, exc: Exception) -> click.Command:
    @click.command(name, context_settings={"ignore_unknown_options": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def command(args: tuple[str, ...]) -> None:
        raise click.ClickException(f"`omni generate {name}` is not available here: {exc}")

    return command


@click.group(cls=GenerateGroup, lazy_commands=SUBCOMMANDS)
def generate() -> None:
    """Generate an image, a video, audio, speech or a chat answer with an installed pipeline."""


def _common_options(func: Any) -> Any:
    options = [
        click.option("--seed", type=click.IntRange(0, 2**63 - 1), help="Noise seed."),
        click.option("--size", metavar="WxH", help="Output size, e.g. 832x480."),
        click.option("--height", type=click.IntRange(1, 8192)),
        click.option("--width", type=click.IntRange(1, 8192)),
        click.option("--steps", type=click.IntRange(1, 1000), help="Denoising steps."),
        click.option("--guidance", type=click.FloatRange(0, 100), help="Guidance scale."),
        click.option("--negative-prompt", help="What to steer away from."),
        click.option(
            "--image",
            "images",
            multiple=True,
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            help="Conditioning image (repeatable).",
        ),
        click.option(
            "--extra",
            "extras",
            multiple=True,
            metavar="KEY=VALUE",
            help="Pipeline extra (repeatable); VALUE is parsed as JSON when it can be.",
        ),
        click.option("--pipeline", help="Use this registered pipeline, not the detected one."),
        click.option("--device", help="torch device, e.g. cuda:1 (default: the platform's)."),
        click.option("--dtype", help="bfloat16, float16 or float32."),
        click.option("--attention-backend", help="Attention backend for every role."),
        click.option(
            "--cfg-parallel-size",
            type=click.IntRange(1, 2),
            default=1,
            help="2: run CFG's two branches on two devices.",
        ),
        click.option(
            "--ulysses-degree",
            type=click.IntRange(1, 64),
            default=1,
            help="Split the sequence over N devices (Ulysses).",
        ),
        click.option("--quiet", "-q", is_flag=True, help="No progress bar."),
    ]
    for option in reversed(options):
        func = option(func)
    return acceleration_options(memory_options(func))


@generate.command("video")
@click.argument("model")
@click.argument("prompt")
@click.option(
    "-o",
    "--output",
    default="out.mp4",
    show_default=True,
    callback=output_file("video", (".mp4",)),
    help="MP4 file (with the sound track where the model makes one).",
)
@click.option("--frames", "num_frames", type=click.IntRange(1, 1024), help="Frames (4k+1).")
@click.option("--fps", type=click.IntRange(1, 120), help="MP4 frame rate.")
@_common_options
def generate_video(
    model: str, prompt: str, output: Path, num_frames: int | None, fps: int | None, **options: Any
) -> None:
    """Generate a video from PROMPT with MODEL (a folder or a Hub id)."""
    result, elapsed = _run("video", model, prompt, num_frames=num_frames, **options)
    if result.video is None:
        raise click.ClickException("the pipeline returned no video")
    from omni_core.media.visual import save_video

    # A video with a sound track (e.g. LTX-2's) gets it muxed into the MP4.
    has_sound = result.audio is not None and result.sample_rate
    sound = (result.audio, result.sample_rate) if has_sound else None
    path = save_video(result.video, output, fps=fps or result.fps or 16, audio=sound)
    frames, height, width, _ = result.video.shape
    click.echo(
        f"wrote {path} ({frames} frames, {width}x{height}, seed {result.info.get('seed')}, "
        f"{elapsed:.1f}s)",
        err=True,
    )


@generate.command("image")
@click.argument("model")
@click.argument("prompt")
@click.option(
    "-o",
    "--output",
    default="out.png",
    show_default=True,
    callback=output_file("image", (".png", ".jpg", ".jpeg", ".webp")),
    help="Image file (.png, .jpg, .webp); several outputs get -1, -2, ... suffixes.",
)
@click.option("-n", "num_outputs", type=click.IntRange(1, 16), default=1, help="Images.")
@_common_options
def generate_image(model: str, prompt: str, output: Path, num_outputs: int, **options: Any) -> None:
    """Generate an image from PROMPT with MODEL (a folder or a Hub id)."""
    result, elapsed = _run("image", model, prompt, num_outputs=num_outputs, **options)
    from omni_core.media.visual import save_image

    images = list(result.images or [])
    if not images:
        raise click.ClickException("the pipeline returned no image")
    paths = []
    for i, image in enumerate(images):
        target = output if len(images) == 1 else output.with_stem(f"{output.stem}-{i + 1}")
        paths.append(save_image(image, target))
    click.echo(
        f"wrote {', '.join(str(p) for p in paths)} ({images[0].width}x{images[0].height}, "
        f"seed {result.info.get('seed')}, {elapsed:.1f}s)",
        err=True,
    )


def parse_size(size: str | None, height: int | None, width: int | None) -> tuple[Any, Any]:
    """``WxH`` (or ``--height``/``--width``) -> (height, width); a UsageError when malformed."""
    if size is None:
        return height, width
    if height is not None or width is not None:
        raise click.UsageError("give --size or --height/--width, not both")
    parts = size.lower().replace("*", "x").split("x")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise click.BadParameter(
            f"{size!r} is not WIDTHxHEIGHT (e.g. 832x480)", param_hint="--size"
        )
    width, height = int(parts[0]), int(parts[1])
    if not (1 <= width <= 8192 and 1 <= height <= 8192):  # the server's bound, said the same way
        raise click.BadParameter(
            f"{size!r}: width and height must be between 1 and 8192", param_hint="--size"
        )
    return height, width


def _load_images(paths: tuple[Path, ...]) -> list[Any]:
    from PIL import Image, UnidentifiedImageError

    images = []
    for path in paths:
        try:
            with Image.open(path) as handle:
                images.append(handle.convert("RGB"))
        except (UnidentifiedImageError, OSError) as exc:
            raise click.BadParameter(
                f"{path}: not a readable image ({exc})", param_hint="--image"
            ) from None
    return images


def _run(
    kind: str,
    model: str,
    prompt: str,
    *,
    seed: int | None,
    size: str | None,
    height: int | None,
    width: int | None,
    steps: int | None,
    guidance: float | None,
    negative_prompt: str | None,
    images: tuple[Path, ...],
    extras: tuple[str, ...],
    pipeline: str | None,
    device: str | None,
    dtype: str | None,
    attention_backend: str | None,
    cfg_parallel_size: int,
    ulysses_degree: int,
    quiet: bool,
    cache: str | None = None,
    cache_options: tuple[str, ...] = (),
    quantization: str | None = None,
    compile_: bool | None = None,
    fp8: bool = False,
    num_frames: int | None = None,
    num_outputs: int = 1,
    memory_kwargs: dict[str, Any] | None = None,
    fields: dict[str, Any] | None = None,
) -> tuple[Any, float]:
    """Check, load, generate: one request of modality ``kind``; ``fields`` are more shared
    request fields (e.g. an audio clip's ``duration_s``)."""
    import time

    from omni_core.api import locate_model
    from omni_core.contract.requests import check_lora_request, make_request
    from omni_core.diffusion.acceleration.lora import fused_defaults

    height, width = parse_size(size, height, width)
    accel = acceleration_kwargs(cache, cache_options, quantization, compile_, fp8)
    check_load_options(device, dtype, attention_backend, fp8=fp8)
    if "cache" in accel:
        from omni_core.api import _as_config
        from omni_core.contract.config import CacheConfig

        _as_config(accel["cache"], CacheConfig, "cache")
    memory = dict(memory_kwargs or {})
    # Every --lora but the fused one applies to this request; a fused distill's recommended
    # steps / guidance are the defaults (read from its file now, before the pipeline's own).
    lora = memory.get("lora") or {}
    names = [a["name"] for a in lora.get("adapters", ()) if a["name"] != lora.get("fuse")]
    defaults = fused_defaults(lora)
    shared: dict[str, Any] = {
        "lora": names,
        "prompt": prompt,
        "negative_prompt": negative_prompt,
        "height": height,
        "width": width,
        "num_frames": num_frames,
        "num_inference_steps": steps or defaults.get("num_inference_steps"),
        "guidance_scale": guidance if guidance is not None else defaults.get("guidance_scale"),
        "seed": seed,
        "num_outputs": num_outputs,
        "images": _load_images(images),
        **(fields or {}),
    }
    request = make_request(shared, extras=parse_extras(extras), extras_at="--extra")

    # Before any weights: find the pipeline and let it check the request against the configs.
    location = locate_model(model, pipeline)
    spec = location.spec
    if not spec.fallback and spec.modality != kind:
        raise InvalidRequestError(
            f"{model} is served by {spec.name!r}, {with_article(spec.modality)} pipeline; use "
            f"`omni generate {spec.modality}`",
            param="model",
        )
    request = spec.load().precheck(location.path, request)

    from omni_core.api import Omni

    if quiet:
        _no_library_progress_bars()
    else:
        click.echo(f"loading {model} with {spec.name} ...", err=True)
    started = time.perf_counter()
    with Omni(
        location.path,
        pipeline=spec.name,
        device=device,
        dtype=dtype,
        attention=attention_backend,
        cfg_parallel_size=cfg_parallel_size,
        ulysses_degree=ulysses_degree,
        **accel,
        **memory,
    ) as omni:
        request = omni.pipeline.validate(request)  # the one validate, on the loaded pipeline
        request = check_lora_request(omni.pipeline.adapters, request)
        bar = _ProgressBar(quiet)
        try:
            (result,) = omni.run([request], progress=bar)
        finally:
            bar.close()
    return result, time.perf_counter() - started


def _no_library_progress_bars() -> None:
    """``-q``: no weight-loading bars either. The Hugging Face libraries read this variable when
    they are first imported, which in ``omni generate`` happens after this point (the weights
    load lazily); huggingface_hub's own bars are switched off too if it is imported already."""
    import os

    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()


class _ProgressBar:
    """A click progress bar on stderr, created at the first step (when the total is known)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.bar: Any = None
        self.done = 0

    def __call__(self, request_id: str, done: int, total: int) -> None:
        if self.quiet:
            return
        if self.bar is None:
            self.bar = click.progressbar(length=total, label="denoising", file=sys.stderr)
            self.bar.__enter__()
        self.bar.update(done - self.done)
        self.done = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


__all__ = [
    "OmniError",
    "acceleration_kwargs",
    "acceleration_options",
    "check_load_options",
    "generate",
    "parse_extras",
    "parse_size",
]
