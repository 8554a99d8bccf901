"""``import omni_core`` is the whole public SDK, cheap to import, and what plugins use.

- importing it loads no torch, numpy or pydantic (one subprocess: this process has them all);
- ``omni_core.__all__`` is exactly the lazy table plus the eager names, and every name resolves;
- the shipped plugins (plugins/*/src) import only the top level ``omni_core``, except the
  submodules listed below with the reason each is needed.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import omni_core

ROOT = Path(__file__).resolve().parents[2]
#: Names bound when ``omni_core`` is imported (everything else is lazy).
EAGER = {"PLUGIN_API_VERSION", "__version__", "hookimpl"}

#: Submodules a shipped plugin may import besides ``omni_core``, and why.
ALLOWED_SUBMODULES: dict[str, str] = {
    # The plugin-author kit (isolated hosts, spec checks) is for tests and tiny-checkpoint
    # builders, never for the runtime path; it is documented in sdk-docs' testing page.
    "omni_core.testing": "plugin test kit (only in testing modules)",
}


def test_importing_omni_core_loads_no_heavy_dependency() -> None:
    code = (
        "import json, sys, omni_core; "
        "print(json.dumps(sorted(m for m in ('torch', 'numpy', 'pydantic', 'diffusers', "
        "'transformers', 'PIL') if m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(out.stdout) == []


def test_all_is_the_lazy_table_plus_the_eager_names_and_every_name_resolves() -> None:
    names = omni_core.__all__
    assert len(names) == len(set(names)), "duplicates in omni_core.__all__"
    assert set(names) == set(omni_core._LAZY) | EAGER
    assert sorted(dir(omni_core)) == sorted(names)
    for name in names:
        assert getattr(omni_core, name) is not None, name
    for name, target in omni_core._LAZY.items():
        attr = target.partition(":")[2]
        assert attr == name, f"{name} -> {target}: a public name is the object's own name"


def _plugin_sources() -> list[Path]:
    return sorted(
        p for p in (ROOT / "plugins").glob("*/src/**/*.py") if ".egg-info" not in p.as_posix()
    )


def _is_testing_module(path: Path) -> bool:
    return path.stem == "testing" or "testing" in path.parts[-2:-1]


def test_shipped_plugins_import_only_the_top_level_sdk() -> None:
    sources = _plugin_sources()
    assert sources, "no plugin sources found"
    found = []
    for path in sources:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module or ""]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            for module in modules:
                if module == "omni_core" or not module.startswith("omni_core"):
                    continue
                allowed = any(module == m or module.startswith(m + ".") for m in ALLOWED_SUBMODULES)
                if allowed and _is_testing_module(path):
                    continue
                rel = path.relative_to(ROOT).as_posix()
                found.append(f"{rel}:{node.lineno} imports {module}")
    assert found == [], "plugins use `from omni_core import ...` only:\n" + "\n".join(found)
