"""The plugin-author test kit (``omni_core.testing``) itself: cheap to import, every name it
lists resolves, and its package check finds each kind of problem it promises to."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import omni_core
import omni_core.testing as kit


def test_importing_the_kit_loads_no_torch() -> None:
    code = (
        "import json, sys, omni_core.testing; "
        "print(json.dumps([m for m in ('torch', 'numpy', 'click') if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(out.stdout) == []


def test_every_kit_name_resolves_to_itself() -> None:
    assert kit.__all__ == sorted(set(kit.__all__))
    assert sorted(dir(kit)) == kit.__all__
    for name in kit.__all__:
        value = getattr(kit, name)
        assert getattr(value, "__name__", name) == name, f"omni_core.testing.{name}: {value!r}"


def test_run_cli_is_the_omni_command() -> None:
    result = kit.run_cli("--version")
    assert result.exit_code == 0 and omni_core.__version__ in result.output
    bad = kit.run_cli("generate", "image", "/no/such/model", "x", "-o", "/tmp/never.png")
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_package_check_names_each_problem(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "src/omni_x/__init__.py": "",
            "src/omni_x/a.py": "from omni_core.contract.errors import ConfigError\n"
            "from . import b\n",
            # deferred imports count: a cycle with a.py, and a builder reached from serving code
            "src/omni_x/b.py": "def f():\n    from .a import ConfigError\n"
            "    from omni_x.testing import tiny\n",
            "src/omni_x/bench.py": "def build():\n    from omni_x.testing import tiny\n",
            "src/omni_x/testing/__init__.py": "",
            "src/omni_x/testing/tiny.py": "from omni_core.testing import run_cli\n",
            "tests/test_x.py": "from omni_core.cli import cli\nfrom omni_core import NoSuchName\n",
        },
    )
    assert kit.import_cycles(tmp_path / "src/omni_x") == [["omni_x.a", "omni_x.b"]]
    with pytest.raises(AssertionError, match="omni_x's imports") as info:
        kit.assert_package_imports_sound(
            tmp_path / "src/omni_x", tests=tmp_path / "tests", testing_users=("bench",)
        )
    lines = str(info.value).splitlines()[1:]
    assert [line.replace(str(tmp_path) + "/", "") for line in lines] == [
        "src/omni_x/a.py:1 imports omni_core.contract.errors",
        "tests/test_x.py:1 imports omni_core.cli",
        "tests/test_x.py:2 imports NoSuchName from omni_core, which does not list it",
        "omni_x.a <-> omni_x.b import each other",
        "src/omni_x/b.py:3 imports omni_x.testing.tiny, a testing module",
    ]
