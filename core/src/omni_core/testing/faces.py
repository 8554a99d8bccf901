"""Check that a plugin's code imports omni-core through its public faces only."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

#: The public faces: ``import omni_core`` and the lane and shell faces under it.
PUBLIC_FACES: frozenset[str] = frozenset(
    {
        "omni_core",
        "omni_core.diffusion",
        "omni_core.speech",
        "omni_core.chat",
        "omni_core.runtime",
        "omni_core.serving",
        "omni_core.bench",
        "omni_core.testing",
    }
)


def non_face_imports(paths: Iterable[Path], *, test_kit: bool = True) -> list[str]:
    """``"file:line imports module"`` for every omni_core import of ``paths`` that is not a
    public face (``test_kit=False``: ``omni_core.testing`` counts as internal too, as it should
    for a plugin's runtime code), and for every name imported from a face that it lacks."""
    import importlib

    found = []
    for path in paths:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                modules, names = [node.module or ""], [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                modules, names = [a.name for a in node.names], []
            else:
                continue
            for module in modules:
                if not module.startswith("omni_core"):
                    continue
                kit = module == "omni_core.testing" or module.startswith("omni_core.testing.")
                if kit and test_kit:
                    continue
                if module not in PUBLIC_FACES or (kit and not test_kit):
                    found.append(f"{path}:{node.lineno} imports {module}")
                    continue
                public = set(importlib.import_module(module).__all__)
                found += [
                    f"{path}:{node.lineno} imports {name} from {module}, which does not list it"
                    for name in names
                    if name not in public
                ]
    return found


def assert_imports_only_faces(paths: Iterable[Path], *, test_kit: bool = True) -> None:
    """Fail naming each import of ``paths`` that reaches past omni-core's public faces."""
    found = non_face_imports(paths, test_kit=test_kit)
    assert found == [], "import omni-core through its faces only:\n" + "\n".join(found)
