"""The omni demo (`nox -s demo`): the main job, end to end, on this machine.

It builds TINY RANDOM-WEIGHT checkpoints -- real diffusers/transformers layouts, random weights,
so the outputs are noise, not pictures or words -- with each installed model plugin's
``omni_<pkg>.testing`` builder, then runs the real CLI on them:

    omni generate video <tiny wan>   "..." -o out/video.mp4
    omni generate image <tiny qwen>  "..." -o out/image.png
    omni generate speech "..." --model <tiny tts> -o out/speech.wav

A family whose plugin or builder is not there yet is skipped with a printed note. Each step is a
``Step`` in ``STEPS``; a server step (``omni serve`` + one request of each kind) slots in after
the CLI steps.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Family:
    """A model family: how to build its tiny checkpoint and how to generate with it."""

    name: str
    builder: str  # "module:function"
    builder_kwargs: dict[str, str]
    command: list[str]  # after `omni generate`; {model} and {out} are filled in
    output: str
    #: Options sized for a tiny checkpoint on a CPU; only those `--help` lists are passed.
    small: dict[str, str] = field(default_factory=dict)


FAMILIES = [
    Family(
        name="wan (video)",
        builder="omni_wan.testing:build_tiny_wan",
        builder_kwargs={"variant": "t2v"},
        command=["video", "{model}", "a red fox running through snow", "-o", "{out}"],
        output="video.mp4",
        small={"--height": "64", "--width": "64", "--num-frames": "9", "--frames": "9",
               "--steps": "4", "--seed": "0"},
    ),
    Family(
        name="qwen-image (image)",
        builder="omni_qwen.testing:build_tiny_qwen_image",
        builder_kwargs={"variant": "t2i"},
        command=["image", "{model}", "a lighthouse at dusk, oil painting", "-o", "{out}"],
        output="image.png",
        small={"--height": "64", "--width": "64", "--steps": "4", "--seed": "0"},
    ),
    Family(
        name="tts (speech)",
        builder="omni_tts.testing:build_tiny_tts",
        builder_kwargs={"family": "vits"},
        command=["speech", "Hello from omni.", "--model", "{model}", "-o", "{out}"],
        output="speech.wav",
        small={"--seed": "0"},
    ),
]


@dataclass
class Context:
    out: Path
    work: Path
    checkpoints: dict[str, Path] = field(default_factory=dict)
    produced: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def omni(*args: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the real `omni` CLI of this interpreter's environment."""
    command = [sys.executable, "-m", "omni_core.cli", *args]
    if not quiet:
        print("$ omni " + shlex.join(args), flush=True)
    result = subprocess.run(command, text=True, capture_output=True)
    if result.stdout.strip() and not quiet:
        print(result.stdout.rstrip())
    if check and result.returncode != 0:
        print(result.stderr.rstrip(), file=sys.stderr)
        raise SystemExit(f"demo failed: `omni {' '.join(args)}` exited {result.returncode}")
    return result


def load_builder(reference: str) -> Callable[..., Path] | None:
    module_name, _, attr = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            return None  # the plugin or its testing module is not there (yet)
        raise
    return getattr(module, attr, None)


def step_list_plugins(ctx: Context) -> None:
    omni("list-plugins")


def step_build_checkpoints(ctx: Context) -> None:
    print("Building tiny RANDOM-WEIGHT checkpoints (outputs will be noise, by design).")
    for family in FAMILIES:
        builder = load_builder(family.builder)
        if builder is None:
            note = f"{family.name}: skipped, {family.builder} is not installed yet"
            print(f"  - {note}")
            ctx.skipped.append(note)
            continue
        started = time.perf_counter()
        path = Path(builder(ctx.work / family.name.split()[0], **family.builder_kwargs))
        ctx.checkpoints[family.name] = path
        print(f"  - {family.name}: {path} ({time.perf_counter() - started:.1f} s)")


def _supported(subcommand: str, options: dict[str, str]) -> list[str]:
    help_text = omni("generate", subcommand, "--help", check=False, quiet=True).stdout
    flags = set(re.findall(r"(--[a-z0-9][a-z0-9-]*)", help_text))
    args: list[str] = []
    for flag, value in options.items():
        if flag in flags and not (flag == "--frames" and "--num-frames" in flags):
            args += [flag, value]
    return args


def step_generate(ctx: Context) -> None:
    if omni("generate", "--help", check=False, quiet=True).returncode != 0:
        note = "omni generate: skipped, the command is not installed yet"
        print(note)
        ctx.skipped.append(note)
        return
    for family in FAMILIES:
        model = ctx.checkpoints.get(family.name)
        if model is None:
            continue
        out = ctx.out / family.output
        args = [a.format(model=model, out=out) for a in family.command]
        args += _supported(family.command[0], family.small)
        started = time.perf_counter()
        omni("generate", *args)
        if not out.is_file() or out.stat().st_size == 0:
            raise SystemExit(f"demo failed: {out} was not written")
        ctx.produced.append(out)
        print(f"  -> {out} ({out.stat().st_size} bytes, {time.perf_counter() - started:.1f} s)")


#: The demo, in order. The server step (`omni serve` + one request per kind) goes after these.
STEPS: list[tuple[str, Callable[[Context], None]]] = [
    ("installed plugins", step_list_plugins),
    ("tiny checkpoints", step_build_checkpoints),
    ("omni generate", step_generate),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out", help="output folder")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ctx = Context(out=args.out, work=args.out / "tiny-checkpoints")
    if ctx.work.exists():
        shutil.rmtree(ctx.work)
    ctx.work.mkdir(parents=True)
    for title, step in STEPS:
        print(f"\n== {title} ==", flush=True)
        step(ctx)
    print("\n== summary ==")
    for path in ctx.produced:
        print(f"  wrote {path}")
    for note in ctx.skipped:
        print(f"  skipped {note}")
    if not ctx.produced and not ctx.skipped:
        print("  nothing to do")
    return 0


if __name__ == "__main__":
    sys.exit(main())
