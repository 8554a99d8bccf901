"""Every fenced block of README.md and sdk-docs/docs/*.md works as written (issue #34, point 3).

The convention (for contributors: sdk-docs/docs/testing-plugins.md, "The documentation's own
code blocks"):

- every block names its language: ``bash``, ``python``, ``toml``, ``json``, ``yaml``, ``ini`` or
  ``text`` (diagrams, file trees, output, usage synopses: not checked);
- ``toml``, ``json``, ``yaml`` and ``ini`` blocks parse; ``python`` blocks compile, import
  omni-core through its public faces only, and every module and name they import exists here;
- a ``bash`` block preceded by ``<!-- runs-after-demo -->`` runs on this machine after
  ``nox -s demo``, as written: it uses ``.nox/demo/bin/omni`` / ``.nox/demo/bin/python`` and the
  checkpoints of ``out/tiny-checkpoints/``. The test runs a page's marked blocks in order in one
  bash (as a reader pastes them into one terminal), in a temporary folder where ``.nox/demo`` is
  this test session's virtualenv (``nox -s tests`` installs everything the demo's has, and
  more) and ``out/tiny-checkpoints/`` holds the checkpoints the blocks name, built by the
  demo's own table of builders; the venv's ``bin`` is not on ``PATH``, as in a fresh shell;
- any other ``bash`` block, and a ``python`` block that makes a model, a client or an app
  (``Omni(``, ``OpenAI(``, ``create_app(``), says what it needs in the paragraph right before
  it, with a ``Needs:`` sentence (a GPU, a Hub checkpoint, network, an installed omni); bash
  blocks must parse (``bash -n``). The README's first block is the demo itself (it makes that
  state).
"""

from __future__ import annotations

import ast
import configparser
import importlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "sdk-docs" / "docs").glob("*.md"))]
LANGUAGES = {"bash", "python", "toml", "json", "yaml", "ini", "text"}
RUNS_AFTER_DEMO = "runs-after-demo"
#: A Python block that builds one of these runs a model or talks to a server: a program.
_PROGRAM = re.compile(r"\b(Omni|OpenAI|create_app)\(")
_OPEN = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_COMMENT = re.compile(r"^\s*<!--\s*(.*?)\s*-->\s*$")
#: Files a runnable block says it writes: ``open("x", "wb")``, ``-o x``, ``--out x``.
_WRITES = re.compile(r"""open\("([^"]+)", "wb"\)|(?:^|\s)(?:-o|--out|--output) ([^\s'"]+)""")
RUN_TIMEOUT_S = 600
STOP_GRACE_S = 45  # `omni serve` lets running work finish for up to 30 s on SIGTERM


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page, with what precedes it."""

    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    marker: str | None  # the HTML comment right before the fence
    before: str  # the paragraph right before the fence (and its marker)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _context(lines: list[str], fence: int) -> tuple[str | None, str]:
    i, marker = fence - 1, None
    while i >= 0 and not lines[i].strip():
        i -= 1
    if i >= 0 and (comment := _COMMENT.match(lines[i])):
        marker, i = comment.group(1), i - 1
        while i >= 0 and not lines[i].strip():
            i -= 1
    paragraph: list[str] = []
    while i >= 0 and lines[i].strip() and not _OPEN.match(lines[i]):
        paragraph.insert(0, lines[i].strip())
        i -= 1
    return marker, " ".join(paragraph)


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` (indented ones, in list items, dedented)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = _OPEN.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        close = re.compile(rf"^ *{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = i + 1
        while end < len(lines) and not close.match(lines[end]):
            end += 1
        assert end < len(lines), f"{page.relative_to(ROOT)}:{i + 1}: the block is never closed"
        body = [line[indent:] if not line[:indent].strip() else line for line in lines[i + 1 : end]]
        info = opening["info"].split()
        marker, before = _context(lines, i)
        found.append(
            Block(page, i + 1, info[0] if info else "", "\n".join(body) + "\n", marker, before)
        )
        i = end + 1
    return found


BLOCKS = [block for page in PAGES for block in blocks_of(page)]
CHECKED = [block for block in BLOCKS if block.language in LANGUAGES - {"text"}]
RUN_PAGES = sorted({b.page for b in BLOCKS if b.marker == RUNS_AFTER_DEMO})


def _is_the_demo(block: Block) -> bool:
    """The README's first block: the demo itself, which makes the state the others start from."""
    return block == BLOCKS[0] and "python3 -m nox -s demo" in block.code


def test_every_block_names_its_language() -> None:
    unnamed = [
        f"{b.where}: {b.language or '(none)'}" for b in BLOCKS if b.language not in LANGUAGES
    ]
    assert unnamed == [], f"name each block's language, one of {sorted(LANGUAGES)}:\n" + "\n".join(
        unnamed
    )


def test_the_readmes_own_examples_run_here() -> None:
    """Serving and the chat answer, the README's examples, are runs-after-demo blocks."""
    readme = [b for b in BLOCKS if b.page.name == "README.md" and b.marker == RUNS_AFTER_DEMO]
    code = "".join(b.code for b in readme)
    for example in ("omni serve", "/v1/images/generations", "chat.completions.create"):
        assert example in code, f"the README's {example!r} example is not a {RUNS_AFTER_DEMO} block"


def _import_problem(module: str, name: str | None) -> str | None:
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:
        return f"import {module}: {exc}"
    if name is None or name == "*" or hasattr(imported, name):
        return None
    try:
        importlib.import_module(f"{module}.{name}")
    except ImportError:
        return f"{module} has no {name}"
    return None


def python_problems(block: Block, scratch: Path) -> list[str]:
    """Why a Python block does not compile or imports what does not exist (or past the faces)."""
    from omni_core.testing import non_face_imports

    try:
        tree = ast.parse(block.code, filename=block.where)
    except SyntaxError as exc:
        return [f"does not compile: {exc}"]
    source = scratch / "block.py"
    source.write_text(block.code, encoding="utf-8")
    problems = [p.replace(str(source), "line") for p in non_face_imports([source])]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            wanted = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            wanted = [(node.module, alias.name) for alias in node.names]
        else:
            continue
        problems += [p for m, n in wanted if (p := _import_problem(m, n)) is not None]
    if _PROGRAM.search(block.code) and "Needs:" not in block.before:
        problems.append(
            "makes a model, a client or an app: say what it needs ('Needs: ...') right before"
        )
    if block.marker == RUNS_AFTER_DEMO:
        problems.append(f"{RUNS_AFTER_DEMO} is for bash blocks: `.nox/demo/bin/python - <<'PY'`")
    return problems


def bash_problems(block: Block) -> list[str]:
    problems = []
    parsed = subprocess.run(
        ["bash", "-n"], input=block.code, capture_output=True, text=True, timeout=30
    )
    if parsed.returncode != 0:
        problems.append(f"bash -n: {parsed.stderr.strip()}")
    if block.marker not in (None, RUNS_AFTER_DEMO):
        problems.append(f"unknown marker <!-- {block.marker} --> (known: {RUNS_AFTER_DEMO})")
    if block.marker is None and "Needs:" not in block.before and not _is_the_demo(block):
        problems.append(
            f"neither <!-- {RUNS_AFTER_DEMO} --> nor a 'Needs: ...' sentence right before it"
        )
    return problems


def file_problems(block: Block) -> list[str]:
    """A fragment of a TOML / JSON / YAML / INI file parses."""
    import yaml

    parsers = {
        "toml": (tomllib.loads, tomllib.TOMLDecodeError),
        "json": (json.loads, json.JSONDecodeError),
        "yaml": (yaml.safe_load, yaml.YAMLError),
        "ini": (configparser.ConfigParser(interpolation=None).read_string, configparser.Error),
    }
    parse, error = parsers[block.language]
    try:
        parse(block.code)
    except error as exc:
        return [f"does not parse as {block.language}: {exc}"]
    return []


@pytest.mark.parametrize("block", CHECKED, ids=[b.where for b in CHECKED])
def test_block_is_valid_and_says_what_it_needs(block: Block, tmp_path: Path) -> None:
    if block.language == "python":
        problems = python_problems(block, tmp_path)
    elif block.language == "bash":
        problems = bash_problems(block)
    else:
        problems = file_problems(block)
    assert problems == [], f"{block.where}:\n" + "\n".join(problems) + f"\n---\n{block.code}"


# ----------------------------------------------------------------------------- runs-after-demo


def _demo() -> ModuleType:
    """demo/run_demo.py as a module: its table of tiny-checkpoint builders is the one used."""
    spec = importlib.util.spec_from_file_location("omni_demo_script", ROOT / "demo" / "run_demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``out/tiny-checkpoints/`` as the demo leaves it, with the checkpoints the runnable blocks
    name (built by the demo's builders, into the demo's folder names)."""
    demo = _demo()
    families = {family.name.split()[0]: family for family in demo.FAMILIES}
    code = "".join(b.code for b in BLOCKS if b.marker == RUNS_AFTER_DEMO)
    named = sorted(set(re.findall(r"out/tiny-checkpoints/([\w.-]+)", code)))
    unknown = sorted(set(named) - set(families))
    assert not unknown, f"the demo builds no out/tiny-checkpoints/{unknown} ({sorted(families)})"
    work = tmp_path_factory.mktemp("tiny-checkpoints")
    for name in named:
        family = families[name]
        builder = demo.load_builder(family.builder)
        assert builder is not None, f"{family.builder} is not installed"
        built = Path(builder(work / name, **family.builder_kwargs))
        assert built == work / name, (family.builder, built)
    return work


def _without(path: str, folder: Path) -> str:
    return os.pathsep.join(p for p in path.split(os.pathsep) if p and Path(p).resolve() != folder)


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the session's process group (a server a block left running), then SIGKILL."""
    for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN_PAGES, ids=[p.name for p in RUN_PAGES])
def test_runs_after_demo_blocks_run_as_written(
    page: Path, tiny_checkpoints: Path, tmp_path: Path
) -> None:
    blocks = [b for b in BLOCKS if b.page == page and b.marker == RUNS_AFTER_DEMO]
    (tmp_path / ".nox").mkdir()
    (tmp_path / ".nox" / "demo").symlink_to(Path(sys.prefix), target_is_directory=True)
    assert (tmp_path / ".nox" / "demo" / "bin" / "omni").is_file(), "this venv has no omni"
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "tiny-checkpoints").symlink_to(tiny_checkpoints, target_is_directory=True)
    (tmp_path / "home").mkdir()
    script = ["set -eo pipefail"]
    for block in blocks:
        script += [f"echo '>>> {block.where}' >&2", block.code]
    (tmp_path / "blocks.sh").write_text("\n".join(script), encoding="utf-8")
    env = {
        **os.environ,
        "PATH": _without(os.environ.get("PATH", ""), Path(sys.executable).parent.resolve()),
        "HOME": str(tmp_path / "home"),  # omni serve's state, omni bench's checkpoints
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("VIRTUAL_ENV", None)
    log = tmp_path / "blocks.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["bash", "blocks.sh"],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: whatever it starts is stopped
        )
        try:
            code = process.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            _stop_group(process)
    text = log.read_text(errors="replace")
    failed = re.findall(r">>> (\S+)", text)
    assert code == 0, (
        f"{failed[-1] if failed else page.name} failed (exit {code}); last lines:\n"
        + "\n".join(text.splitlines()[-40:])
    )
    written = {m[0] or m[1] for b in blocks for m in _WRITES.findall(b.code)}
    missing = sorted(
        f for f in written if not (tmp_path / f).is_file() or not (tmp_path / f).stat().st_size
    )
    assert missing == [], f"{page.name}'s blocks say they write {missing}, which are missing"
