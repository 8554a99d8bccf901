"""``omni bench serve --task chat``'s own flags and their run (documented in sdk-docs/docs/
serving.md, "Spoken chat answers"). The flags are read as text and checked here, so a mistake
is one line and exit code 2 (a ConfigError), like the rest of ``omni``."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import click

#: The chat flags: name -> (metavar, help). All default to None: "not given".
_FLAGS: dict[str, tuple[str, str]] = {
    "--concurrency": ("LIST", "chat: answers at once per level, text + audio [default: 1,2,8,32]"),
    "--text-concurrency": (
        "LIST",
        "chat: the text-only levels (modalities [text]); 'none' skips [default: 1,32]",
    ),
    "--max-tokens": ("N", "chat: text tokens per answer [default: 24]"),
    "--rounds": ("N", "chat: times each level runs (answers = level x rounds) [default: 3]"),
    "--checkpoint": ("DIR", "chat: the model folder (in-process comparison, --start-server)"),
    "--voice": ("NAME", "chat: the voice of the answers (default: the model's)"),
    "--audio-shape": ("vllm|openai", "chat: how audio is asked for and read [default: vllm]"),
}


def chat_bench_options(func: Any) -> Any:
    """The chat flags; the command receives them as one ``chat`` keyword (a dict)."""
    names = [f.lstrip("-").replace("-", "_") for f in _FLAGS]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        chat = {name: kwargs.pop(name) for name in [*names, "start_server", "in_process"]}
        chat["options"] = kwargs.pop("load_options")
        chat["serve_args"] = kwargs.pop("serve_args")
        return func(*args, chat=chat, **kwargs)

    options = [click.option(f, default=None, metavar=m, help=h) for f, (m, h) in _FLAGS.items()]
    options += [
        click.option(
            "--start-server",
            is_flag=True,
            default=None,
            help="chat: start `omni serve` on --checkpoint (127.0.0.1) instead of --base-url.",
        ),
        click.option(
            "--in-process/--no-in-process",
            default=None,
            help="chat: also run the answers in-process on --checkpoint [default: on with it].",
        ),
        click.option(
            "--option",
            "load_options",
            multiple=True,
            metavar="KEY=VALUE",
            help="chat: a load option for the started server and in-process (repeatable).",
        ),
        click.option(
            "--serve-arg",
            "serve_args",
            multiple=True,
            metavar="ARG",
            help="chat: an argument added to the started `omni serve` (repeatable).",
        ),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


def _fail(message: str) -> Any:
    from omni_core.contract.errors import ConfigError

    raise ConfigError(message)


def _count(flag: str, value: str | None, default: int) -> int:
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        _fail(f"{flag}: expected a whole number of at least 1, got {value!r}")
    return number


def _levels(flag: str, value: str | None, default: tuple[int, ...]) -> tuple[int, ...]:
    if value is None:
        return default
    if value.strip().lower() in ("none", ""):
        return ()
    levels = []
    for item in value.split(","):
        try:
            levels.append(int(item))
        except ValueError:
            levels.append(0)
        if levels[-1] < 1 or levels[-1] > 4096:
            _fail(f"{flag}: {item.strip()!r} is not a level from 1 to 4096 (e.g. 1,2,8,32)")
    return tuple(levels)


def _given(chat: dict[str, Any]) -> list[str]:
    flags = [f for f in _FLAGS if chat[f.lstrip("-").replace("-", "_")] is not None]
    flags += ["--start-server"] if chat["start_server"] else []
    flags += ["--in-process"] if chat["in_process"] is not None else []
    flags += ["--option"] if chat["options"] else []
    return flags + (["--serve-arg"] if chat["serve_args"] else [])


def check_not_chat(task: str, chat: dict[str, Any]) -> None:
    """The chat flags belong to ``--task chat`` only: one line naming the first one given."""
    given = _given(chat)
    if given:
        _fail(f"{given[0]}: only for --task chat (this run is --task {task})")


def settings_from(chat: dict[str, Any], common: dict[str, Any]) -> Any:
    """The flags -> a :class:`~omni_core.bench.chat.ChatBenchSettings` (ConfigError on a
    mistake, before anything starts)."""
    from omni_core.bench.chat import ChatBenchSettings
    from omni_core.commands.options import key_values

    try:
        options = key_values(tuple(chat["options"]), "--option")
    except click.BadParameter as exc:
        _fail(f"--option: {exc.message}")
    checkpoint = Path(chat["checkpoint"]) if chat["checkpoint"] else None
    if checkpoint is not None and not (checkpoint / "config.json").is_file():
        _fail(f"--checkpoint: {checkpoint} is not a model folder (no config.json)")
    start = bool(chat["start_server"])
    if start and checkpoint is None:
        _fail("--start-server: needs --checkpoint DIR (the model to serve)")
    in_process = chat["in_process"]
    if in_process and checkpoint is None:
        _fail("--in-process: needs --checkpoint DIR (the model to load)")
    if (options or chat["serve_args"]) and not start and not in_process and checkpoint is None:
        _fail("--option/--serve-arg: need --checkpoint DIR (they load the model)")
    shape = (chat["audio_shape"] or "vllm").strip().lower()
    if shape not in ("vllm", "openai"):
        _fail(f"--audio-shape: expected vllm or openai, got {chat['audio_shape']!r}")
    levels = _levels("--concurrency", chat["concurrency"], (1, 2, 8, 32))
    text_levels = _levels("--text-concurrency", chat["text_concurrency"], (1, 32))
    if not levels and not text_levels:
        _fail("--concurrency/--text-concurrency: nothing to measure (both are none)")
    return ChatBenchSettings(
        base_url=common["base_url"],
        model=common["model"],
        api_key=common["api_key"],
        levels=levels,
        text_levels=text_levels,
        max_tokens=_count("--max-tokens", chat["max_tokens"], 24),
        rounds=_count("--rounds", chat["rounds"], 3),
        warmup=common["warmup_requests"],
        seed=common["seed"],
        voice=chat["voice"],
        audio_shape=shape,
        extra=common["extra"],
        checkpoint=checkpoint,
        start_server=start,
        in_process=checkpoint is not None if in_process is None else in_process,
        options=options,
        serve_args=tuple(chat["serve_args"]),
    )


def run_chat(chat: dict[str, Any], common: dict[str, Any], output: Path | None) -> None:
    """Check the flags, measure, print one line per row, write ``output``."""
    import json

    from omni_core.contract.errors import ConfigError

    settings = settings_from(chat, common)
    try:
        import openai  # noqa: F401
    except ImportError:
        _fail("--task chat needs the official openai client: pip install 'omni-core[bench]'")
    from omni_core.bench.chat import run_chat_bench
    from omni_core.bench.chat_stats import format_rows

    try:
        result = run_chat_bench(settings, log=lambda m: click.echo(m, err=True))
    except (OSError, RuntimeError) as exc:
        raise ConfigError(f"benchmark failed: {exc}") from None
    except Exception as exc:
        import httpx

        if isinstance(exc, httpx.HTTPError):
            raise ConfigError(f"cannot reach {settings.base_url}: {exc}") from None
        raise
    result = {"command": common["command"], **result}
    click.echo(format_rows(result["rows"]))
    for key, values in result["comparisons"].items():
        if values:
            shown = ", ".join(f"{k}: {v:.4f}" for k, v in values.items())
            click.echo(f"{key}: {shown}")
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(result, indent=2))
        click.echo(f"wrote {output}")
    if any(row["failed"] for row in result["rows"]):
        raise SystemExit(1)


__all__ = ["chat_bench_options", "check_not_chat", "run_chat", "settings_from"]
