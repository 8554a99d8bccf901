"""The README opens with exactly two commands, and CI runs the second one verbatim (so a green
CI means the README's test command works on a clean clone)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block is not None and text.index(block.group(0)) < 20, "README opens with a bash block"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_the_readme_opens_with_two_commands_and_ci_runs_the_second() -> None:
    commands = _readme_commands()
    assert len(commands) == 2, commands
    ci = [
        line.strip()
        for line in (ROOT / ".ci/run").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "set ", "cd "))
    ]
    assert ci == [commands[1]]


def test_every_nox_session_the_readme_names_exists() -> None:
    noxfile = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    defined = set(re.findall(r"@nox\.session[^\n]*\ndef (\w+)\(", noxfile))
    for command in _readme_commands():
        sessions = command.split("nox -s", 1)[1].split()
        assert sessions and set(sessions) <= defined, (command, defined)
