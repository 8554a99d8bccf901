"""The ``omni`` command line.

Commands live in :mod:`omni_core.commands` and are imported only when invoked, so ``omni --help``
and ``omni list-plugins`` never import torch. Plugins add commands through the
``omni_register_commands`` hook. An :class:`~omni_core.contract.errors.OmniError` becomes a one-line
message and a non-zero exit code, never a traceback; so does a usage mistake (a value out of an
option's range, an unknown option or command): click would print the usage and a hint on lines of
their own, here the hint ends the one ``Error:`` line (exit code 2).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from omni_core import __version__
from omni_core.contract.errors import OmniError


class LazyGroup(click.Group):
    """A click group whose subcommands are ``"module:attr"`` strings imported on first use."""

    def __init__(self, *args: Any, lazy_commands: dict[str, str] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_commands and cmd_name not in self.commands:
            module_name, _, attr = self.lazy_commands[cmd_name].partition(":")
            try:
                command = getattr(importlib.import_module(module_name), attr)
            except (ImportError, AttributeError) as exc:
                # A command whose module (or an optional dependency of it) is missing: one line.
                raise click.ClickException(
                    f"command {cmd_name!r} is not available in this installation: "
                    f"{type(exc).__name__}: {exc}"
                ) from None
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Help text for lazy commands without importing them: the short help is declared here.
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.commands.get(name)
            help_text = cmd.get_short_help_str(60) if cmd else COMMAND_HELP.get(name, "")
            rows.append((name, help_text))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


#: Built-in commands: name -> "module:attr", imported on use.
COMMANDS: dict[str, str] = {
    "list-plugins": "omni_core.commands.plugins:list_plugins",
    "doctor": "omni_core.commands.doctor:doctor",
    "new-plugin": "omni_core.commands.new_plugin:new_plugin",
    "generate": "omni_core.commands.generate:generate",
    "voices": "omni_core.commands.speech:voices",
    "serve": "omni_core.commands.serve:serve",
    "bench": "omni_core.commands.bench:bench",
}

COMMAND_HELP: dict[str, str] = {
    "list-plugins": "List installed plugins and what each provides.",
    "doctor": "Show the platform, devices, versions and what is usable here.",
    "new-plugin": "Create a pip-installable plugin package skeleton.",
    "generate": "Generate an image, a video, audio, speech or a chat answer.",
    "voices": "List the voices of installed speech pipelines.",
    "serve": "Serve models over an OpenAI-compatible HTTP API.",
    "bench": "Benchmark pipelines or a running server.",
}


def _one_line(exc: click.UsageError) -> click.UsageError:
    """``exc`` without its context (click then prints only its ``Error:`` line), the help hint
    appended to the message."""
    hint = ""
    if exc.ctx is not None and exc.ctx.command.get_help_option(exc.ctx) is not None:
        hint = f" (try '{exc.ctx.command_path} --help')"
    return click.UsageError(exc.format_message() + hint)


class OmniCLI(LazyGroup):
    """Root group: adds plugin commands lazily and turns OmniError into clean exits."""

    _plugins_added = False

    def _add_plugin_commands(self) -> None:
        if not OmniCLI._plugins_added:
            OmniCLI._plugins_added = True
            from omni_core.contract.host import get_host

            get_host().add_commands(self)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._add_plugin_commands()
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None:
            self._add_plugin_commands()
            command = super().get_command(ctx, cmd_name)
        return command

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:  # the root's own options
            raise _one_line(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OmniError as exc:
            click.echo(f"Error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except click.UsageError as exc:  # a command's options, an unknown command
            raise _one_line(exc) from None


@click.group(cls=OmniCLI, lazy_commands=COMMANDS)
@click.version_option(__version__, "--version", package_name="omni-core", prog_name="omni")
def cli() -> None:
    """omni: serve generative models (image, video, speech, chat) through plugins."""


def main() -> None:
    cli()


if __name__ == "__main__":  # python -m omni_core.cli (used for -X importtime checks)
    main()
