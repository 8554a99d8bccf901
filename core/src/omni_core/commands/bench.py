"""``omni bench``: benchmarks. A lazy group: ``serve`` and ``pipeline`` are here.

To add a subcommand without touching this file's logic, add ``"name": "module:attr"`` to
:data:`BENCH_COMMANDS` (and its one-line help to :data:`BENCH_HELP`); it is imported only when run.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import click

from omni_core.cli import LazyGroup
from omni_core.commands.bench_chat import chat_bench_options

#: Subcommands of ``omni bench``: name -> "module:attr", imported on use.
BENCH_COMMANDS: dict[str, str] = {
    "serve": "omni_core.commands.bench:bench_serve",
    "pipeline": "omni_core.commands.bench:bench_pipeline",
}

BENCH_HELP: dict[str, str] = {
    "serve": "Load-test a running omni server (throughput, latency, SLO, speech TTFB/RTF).",
    "pipeline": "Registered workloads end to end: omni vs diffusers (eager, compiled) in one run.",
}


class _BenchGroup(LazyGroup):
    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.commands.get(name)
            rows.append((name, cmd.get_short_help_str(60) if cmd else BENCH_HELP.get(name, "")))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group("bench", cls=_BenchGroup, lazy_commands=BENCH_COMMANDS)
def bench() -> None:
    """Benchmark pipelines or a running server."""


def _rate(value: str) -> float:
    try:
        rate = float(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number or 'inf'") from None
    if not rate > 0:
        raise click.BadParameter("must be > 0 (or 'inf' for all at once)")
    return rate


def _extra(value: str | None) -> dict[str, Any]:
    if not value:
        return {}
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise click.BadParameter("must be a JSON object")
    return data


@click.command("serve")
@click.option(
    "--base-url", default="http://127.0.0.1:8000", show_default=True, help="The server to load."
)
@click.option(
    "--task",
    type=click.Choice(["t2i", "i2i", "t2v", "tts", "chat-t2i", "chat-i2i", "realtime", "chat"]),
    required=True,
    help="chat-t2i / chat-i2i drive POST /v1/chat/completions (vLLM-Omni's image path); "
    "realtime: one spoken turn per /v1/realtime session (first audio from the commit, RTF); "
    "chat: streamed text + speech answers per level with the openai client (the chat: flags).",
)
@click.option("--model", default=None, help="Model id (default: the first that fits --task).")
@click.option("--num-prompts", default=32, show_default=True, type=click.IntRange(1, 1_000_000))
@click.option("--max-concurrency", default=8, show_default=True, type=click.IntRange(1, 10_000))
@click.option(
    "--request-rate",
    default="inf",
    show_default=True,
    help="Poisson arrival rate in requests/s; 'inf' sends all at once.",
)
@click.option("--warmup-requests", default=1, show_default=True, type=click.IntRange(0, 1000))
@click.option(
    "--slo-ms",
    default=None,
    type=click.FloatRange(min=0, min_open=True),
    help="Latency objective: report the share of requests that met it.",
)
@click.option("--size", default=None, help="WxH for image and video tasks.")
@click.option("--steps", default=None, type=click.IntRange(1, 1000), help="Denoising steps.")
@click.option("--num-frames", default=None, type=click.IntRange(1, 1024), help="Video frames.")
@click.option("--extra", default=None, help="JSON object of extra request fields.")
@click.option("--api-key", envvar="OMNI_API_KEY", default=None, help="[env: OMNI_API_KEY]")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the summary and every request as JSON.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write a PNG plot (needs matplotlib).",
)
@chat_bench_options
def bench_serve(
    base_url: str,
    task: str,
    model: str | None,
    num_prompts: int,
    max_concurrency: int,
    request_rate: str,
    warmup_requests: int,
    slo_ms: float | None,
    size: str | None,
    steps: int | None,
    num_frames: int | None,
    extra: str | None,
    api_key: str | None,
    seed: int,
    output: Path | None,
    plot_path: Path | None,
    chat: dict[str, Any],
) -> None:
    """Load-test a running omni server and report throughput and latency.

    --task chat measures streamed spoken answers level by level (--concurrency) against
    --base-url or a server it starts (--start-server --checkpoint DIR), and the same answers
    in-process on --checkpoint; --output writes the rows as JSON (sdk-docs: benchmarks).
    """
    import asyncio

    from omni_core.commands.bench_chat import check_not_chat, run_chat

    if task == "chat":
        common = {
            "base_url": base_url,
            "model": model,
            "api_key": api_key,
            "warmup_requests": warmup_requests,
            "seed": seed,
            "extra": _extra(extra),
            "command": _command_line(),
        }
        if plot_path is not None:
            from omni_core.contract.errors import ConfigError

            raise ConfigError("--plot: not for --task chat (its rows are in --output)")
        run_chat(chat, common, output)
        return
    check_not_chat(task, chat)
    from omni_core.bench.serve import BenchConfig, BenchRunner, format_summary, plot, write_json
    from omni_core.contract.errors import ConfigError

    rate = _rate(request_rate)
    if plot_path is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ConfigError("--plot needs matplotlib: pip install 'omni-core[bench]'") from None
    config = BenchConfig(
        base_url=base_url,
        task=task,
        num_prompts=num_prompts,  # type: ignore[arg-type]
        max_concurrency=max_concurrency,
        request_rate=rate,
        warmup_requests=warmup_requests,
        slo_ms=slo_ms,
        model=model,
        api_key=api_key,
        size=size,
        steps=steps,
        num_frames=num_frames,
        extra=_extra(extra),
        seed=seed,
    )
    try:
        summary = asyncio.run(BenchRunner(config).run())
    except (OSError, RuntimeError) as exc:
        raise ConfigError(f"benchmark failed: {exc}") from None
    except Exception as exc:
        import httpx

        if isinstance(exc, httpx.HTTPError):
            raise ConfigError(f"cannot reach {base_url}: {exc}") from None
        raise
    click.echo(format_summary(summary))
    command = "omni bench serve " + " ".join(shlex.quote(a) for a in sys.argv[3:])
    if output is not None:
        write_json(summary, output, command)
        click.echo(f"wrote {output}")
    if plot_path is not None:
        plot(summary, plot_path)
        click.echo(f"wrote {plot_path}")
    if summary["completed"] == 0:
        sys.exit(1)


def _command_line() -> str:
    """The command as typed (``OMNI_BENCH_COMMAND`` wins: wrappers set it)."""
    import os

    if os.environ.get("OMNI_BENCH_COMMAND"):
        return os.environ["OMNI_BENCH_COMMAND"]
    argv = list(sys.argv)
    program = Path(argv[0]).name if argv else "omni"
    return shlex.join([program, *argv[1:]])


@click.command("pipeline")
@click.option(
    "--workload",
    "workloads",
    multiple=True,
    metavar="NAME",
    help="A registered workload (repeatable; default: every non-tiny one). See --list.",
)
@click.option("--tiny", is_flag=True, help="The tiny registered workloads, on CPU (smoke test).")
@click.option(
    "--modes",
    "modes",
    multiple=True,
    metavar="LIST",
    help="Comma-separated: diffusers, diffusers-compiled, omni, omni-fp8, omni-cache:NAME "
    "(default: diffusers,diffusers-compiled,omni; on CPU without the compiled one).",
)
@click.option(
    "--reps",
    default=3,
    show_default=True,
    type=click.IntRange(0, 100),
    help="Steady-state requests per mode after the first (median reported).",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where checkpoint folders are built and kept [default: $OMNI_BENCH_DIR or "
    "~/.cache/omni/bench].",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("pipeline-bench.json"),
    show_default=True,
    help="JSON result file; a PNG plot is written beside it. (Committed results live in "
    "bench/results/.)",
)
@click.option(
    "--layers",
    type=click.IntRange(1, 1000),
    default=None,
    help="Build transformers with this many blocks (real widths); reported per row.",
)
@click.option(
    "--steps",
    type=click.IntRange(1, 1000),
    default=None,
    help="Override the workload's denoising steps.",
)
@click.option("--device", default=None, help="torch device (default: the platform's first).")
@click.option("--dtype", default=None, help="Model dtype (default: bfloat16; float32 on CPU).")
@click.option("--quantizer", default="fp8", show_default=True, help="Quantizer of omni-fp8.")
@click.option("--compile-backend", default=None, help="torch.compile backend (default inductor).")
@click.option("--rebuild", is_flag=True, help="Rebuild checkpoint folders even if present.")
@click.option(
    "--discard-checkpoints",
    is_flag=True,
    help="Delete each checkpoint folder after its workload (small disks).",
)
@click.option("--list", "list_only", is_flag=True, help="List the registered workloads and exit.")
def bench_pipeline(
    workloads: tuple[str, ...],
    tiny: bool,
    modes: tuple[str, ...],
    reps: int,
    work_dir: Path | None,
    out: Path,
    layers: int | None,
    steps: int | None,
    device: str | None,
    dtype: str | None,
    quantizer: str,
    compile_backend: str | None,
    rebuild: bool,
    discard_checkpoints: bool,
    list_only: bool,
) -> None:
    """Run registered workloads through Omni(folder) and their reference, in one process.

    Each workload's checkpoint folder (real layout, random weights) is built once under
    --work-dir; every mode loads it and serves the same request with the same seed, and each
    row reports load time, first and steady-state request time, s/step, peak memory and PSNR
    against the eager reference.
    """
    from omni_core.bench.report import format_table
    from omni_core.bench.runner import (
        BenchOptions,
        default_work_dir,
        parse_modes,
        run_benchmark,
    )
    from omni_core.contract.errors import ConfigError
    from omni_core.contract.host import get_registry

    try:
        chosen_modes = parse_modes(modes) if modes else None
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--modes") from None
    registry = get_registry()
    if list_only:
        for spec in registry.benchmarks.values():
            tag = " (tiny)" if spec.tiny else ""
            click.echo(
                f"{spec.name}{tag}  [{spec.plugin}, pipeline {spec.pipeline}]  {spec.description}"
            )
        return
    options = BenchOptions(
        out=out,
        work_dir=work_dir or default_work_dir(),
        modes=chosen_modes,
        reps=reps,
        layers=layers,
        steps=steps,
        device=device,
        dtype=dtype,
        quantizer=quantizer,
        compile_backend=compile_backend,
        rebuild=rebuild,
        keep_checkpoints=not discard_checkpoints,
        command=_command_line(),
        log=lambda message: click.echo(message, err=True),
    )
    rows = run_benchmark(workloads, tiny=tiny, options=options, registry=registry)
    click.echo(format_table(rows))
    if any(r.get("error") for r in rows):
        sys.exit(1)
