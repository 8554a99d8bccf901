"""Run the ``omni`` command line in this process, as a user would type it.

A plugin that adds a command, a pipeline the CLI serves or a platform ``omni doctor`` reports
tests it through the real command group (lazy commands, plugin commands, the one-line error and
exit code an :class:`~omni_core.OmniError` becomes), not by calling the command's function::

    from omni_core.testing import run_cli

    result = run_cli("generate", "speech", "hello", "-o", str(tmp_path / "a.wav"))
    assert result.exit_code == 0, result.output

The plugins seen are the process-wide host's (:func:`~omni_core.testing.isolated_host` to pick
them). For a separate process (``omni serve``), see :mod:`omni_core.testing.services`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from click.testing import Result


def run_cli(*args: str, catch_exceptions: bool = True) -> Result:
    """``omni ARGS`` through click's ``CliRunner``: the result has ``exit_code``, ``output``
    (stdout and stderr), ``stdout``, ``stderr`` and ``exception``.

    ``catch_exceptions=False`` lets an unexpected exception escape, so the test shows its
    traceback instead of a bare non-zero exit.
    """
    from click.testing import CliRunner

    from omni_core.cli import cli

    return CliRunner().invoke(cli, list(args), catch_exceptions=catch_exceptions)
