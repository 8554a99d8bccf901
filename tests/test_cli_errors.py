"""Mistakes on the command line end in one line and exit code 2, never a traceback: a device
this machine lacks, `omni serve` without the serve extra installed, and click's usage
mistakes (a value out of range, an unknown option or command, a missing argument)."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from omni_core.cli import cli


def _one_line_exit_2(args: list[str], *needles: str) -> str:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, (args, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    output = result.output.strip()
    assert "Traceback" not in output and len(output.splitlines()) == 1, output
    for needle in needles:
        assert needle in output, output
    return output


GENERATE = ["generate", "image", "no/such-model", "a cat"]
GENERATE_VIDEO = ["generate", "video", "no/such-model", "a cat"]
SERVE = ["serve", "no/such-model"]


@pytest.mark.parametrize("command", [GENERATE, GENERATE_VIDEO, SERVE])
def test_cli_device_that_is_no_device(command: list[str]) -> None:
    _one_line_exit_2([*command, "--device", "banana"], "device", "'banana'")


@pytest.mark.parametrize("command", [GENERATE, GENERATE_VIDEO, SERVE])
def test_cli_cuda_device_on_a_cpu_only_machine(command: list[str]) -> None:
    from omni_core.contract.platforms import current_platform

    if current_platform().device_type != "cpu":
        pytest.skip("this machine has an accelerator platform")
    _one_line_exit_2([*command, "--device", "cuda"], "device", "'cuda'", "cpu")
    _one_line_exit_2([*command, "--device", "cuda:1"], "device", "'cuda:1'")


@pytest.mark.parametrize("value", ["-5", "5000", "soon"])
def test_cli_serve_admit_window_out_of_range(value: str) -> None:
    _one_line_exit_2([*SERVE, "--admit-window-ms", value], "'--admit-window-ms'", "serve --help")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--bogus"], "No such option '--bogus'"),
        (["no-such-command"], "No such command 'no-such-command'"),
        ([*SERVE, "--max-batch", "0"], "'--max-batch'"),
        (["serve"], "Missing argument"),
        (["bench", "serve", "--task", "nope"], "'--task'"),
    ],
)
def test_cli_usage_mistakes_are_one_line(args: list[str], needle: str) -> None:
    """click prints a usage mistake as usage, hint and error on lines of their own; omni's
    root group folds the hint into the one ``Error:`` line (exit code 2)."""
    output = _one_line_exit_2(args, needle)
    assert output.startswith("Error: ")


def test_cli_device_index_beyond_the_devices() -> None:
    from omni_core.contract.platforms import current_platform

    platform = current_platform()
    if platform.device_type == "cpu":
        pytest.skip("needs an accelerator platform")
    device = f"{platform.device_type}:{platform.device_count()}"
    _one_line_exit_2([*GENERATE, "--device", device], "does not exist")


@pytest.mark.parametrize("missing", ["uvicorn", "fastapi"])
def test_cli_serve_without_the_serve_extra(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    """As if the package were not installed: importing it fails (None in sys.modules is what
    the import system reports as "No module named ..." for a missing package)."""
    monkeypatch.setitem(sys.modules, missing, None)
    output = _one_line_exit_2(SERVE, "pip install 'omni-core[serve]'", missing)
    assert output.startswith("Error: omni serve needs the serve extra")
