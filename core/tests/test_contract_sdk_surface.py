"""``import omni_core`` is the whole public SDK: a top-level face and one face per lane, each
name listed once, cheap to import, and the only thing plugins use.

- importing it loads no torch, numpy or pydantic (one subprocess: this process has them all);
- ``omni_core.__all__`` is the eager names, the top face's table and the face subpackages; every
  face's ``__all__`` is its own table, every name resolves to an object of that name, and no
  name is in two faces; a lane face has 10 to 25 names;
- the 2.0 spellings (``omni_core.ARState``) still resolve, to the same object, with a warning;
- the shipped plugins (``plugins/*/src``) and their tests (``plugins/*/tests``) import only the
  faces (``omni_core.testing``, the test kit, only from tests and ``testing`` modules).
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import omni_core

ROOT = Path(__file__).resolve().parents[2]
#: Names bound when ``omni_core`` is imported (everything else is lazy).
EAGER = {"PLUGIN_API_VERSION", "__version__", "hookimpl"}
#: The faces a plugin may import, and the lane faces among them (sized like a lane's face).
FACES = {"omni_core", *(f"omni_core.{name}" for name in omni_core.FACES)}
LANE_FACES = {"omni_core.diffusion", "omni_core.speech", "omni_core.chat", "omni_core.runtime"}
#: The test kit: for plugin tests and tiny-checkpoint builders, never the runtime path.
TEST_KIT = "omni_core.testing"


def _face_modules() -> dict[str, object]:
    return {n: importlib.import_module(n) for n in sorted(FACES - {TEST_KIT, "omni_core"})}


def test_importing_omni_core_loads_no_heavy_dependency() -> None:
    code = (
        "import json, sys, omni_core, omni_core.speech, omni_core.chat, omni_core.diffusion; "
        "print(json.dumps(sorted(m for m in ('torch', 'numpy', 'pydantic', 'diffusers', "
        "'transformers', 'PIL') if m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(out.stdout) == []


def test_the_top_face_is_its_table_plus_the_eager_names_and_the_faces() -> None:
    names = omni_core.__all__
    assert len(names) == len(set(names)), "duplicates in omni_core.__all__"
    assert set(names) == set(omni_core._face.names) | EAGER | set(omni_core.FACES)
    assert sorted(dir(omni_core)) == sorted(names)
    for name in names:
        assert getattr(omni_core, name) is not None, name


def test_every_face_lists_each_name_once_and_every_name_resolves() -> None:
    seen: dict[str, str] = {name: "omni_core" for name in omni_core._face.names}
    for face_name, face in _face_modules().items():
        names = face.__all__  # type: ignore[attr-defined]
        assert names == sorted(face._face.where), face_name  # type: ignore[attr-defined]
        if face_name in LANE_FACES:
            assert 10 <= len(names) <= 25, f"{face_name} has {len(names)} names"
        for name in names:
            assert name not in seen, f"{name} is in {seen[name]} and {face_name}"
            seen[name] = face_name
            value = getattr(face, name)
            assert getattr(value, "__name__", name) == name, f"{face_name}.{name}: {value!r}"
    for name in omni_core._face.names:
        value = getattr(omni_core, name)
        assert getattr(value, "__name__", name) == name, name


def test_the_2_0_spellings_resolve_with_a_warning() -> None:
    from omni_core.speech import ARState

    with pytest.warns(DeprecationWarning, match=r"omni_core\.speech\.ARState"):
        assert omni_core.ARState is ARState  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        _ = omni_core.NoSuchName  # type: ignore[attr-defined]


def _plugin_files(folder: str) -> list[Path]:
    return sorted(
        p for p in (ROOT / "plugins").glob(f"*/{folder}/**/*.py") if ".egg-info" not in p.as_posix()
    )


def _is_testing_module(path: Path) -> bool:
    return path.stem == "testing" or "testing" in path.parts[-2:-1]


def _non_face_imports(paths: list[Path], *, kit_allowed: bool) -> list[str]:
    found = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module or ""]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            for module in modules:
                if not module.startswith("omni_core") or module in FACES - {TEST_KIT}:
                    continue
                kit = module == TEST_KIT or module.startswith(TEST_KIT + ".")
                if kit and (kit_allowed or _is_testing_module(path)):
                    continue
                rel = path.relative_to(ROOT).as_posix()
                found.append(f"{rel}:{node.lineno} imports {module}")
    return found


def test_shipped_plugins_import_only_the_faces() -> None:
    sources = _plugin_files("src")
    assert sources, "no plugin sources found"
    found = _non_face_imports(sources, kit_allowed=False)
    assert found == [], "plugins import the faces only:\n" + "\n".join(found)


def test_plugin_tests_import_only_the_faces_and_the_test_kit() -> None:
    tests = _plugin_files("tests")
    assert tests, "no plugin tests found"
    found = _non_face_imports(tests, kit_allowed=True)
    assert found == [], (
        "plugin tests use the faces and omni_core.testing (add what they need there):\n"
        + "\n".join(found)
    )
