"""A plugin package's own import graph, read with ``ast`` (nothing is imported), to hold it to
the rules omni-core keeps for itself: omni-core through its faces only, no import cycle, and the
``testing`` modules (tiny-checkpoint builders, stand-ins) kept off the serving path.

Every import counts: module level, inside functions and under ``TYPE_CHECKING`` (a type hint is
still a dependency: two modules that name each other cannot be understood apart)::

    from omni_core.testing import assert_package_imports_sound

    def test_my_package_imports_are_sound() -> None:
        assert_package_imports_sound(SRC / "omni_mine", tests=TESTS, testing_users=("bench",))

:func:`import_graph` and :func:`import_cycles` are the pieces, for a check of your own.
"""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["assert_package_imports_sound", "import_cycles", "import_graph"]


def _modules(package_dir: Path) -> dict[str, Path]:
    root = package_dir.parent
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(path: Path, me: str, known: set[str]) -> dict[str, int]:
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:  # ``from pkg import name``: the module it is in
                name = name.rpartition(".")[0]
            if name and name != me:
                out.setdefault(name, node.lineno)
    return out


def import_graph(package_dir: str | Path) -> dict[str, dict[str, int]]:
    """``{module: {module of the same package it imports: first line}}`` for the package whose
    folder is ``package_dir`` (``src/omni_mine``); module names are dotted (``omni_mine.a.b``)."""
    modules = _modules(Path(package_dir))
    known = set(modules)
    return {name: _imports(path, name, known) for name, path in modules.items()}


def import_cycles(package_dir: str | Path) -> list[list[str]]:
    """The package's import cycles: each group of modules that reach each other through their
    imports (a strongly connected component of two or more), sorted; ``[]`` when there is none.
    """
    graph = {module: set(deps) for module, deps in import_graph(package_dir).items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


def _is_testing(module: str) -> bool:
    return "testing" in module.split(".")[1:]


def assert_package_imports_sound(
    package_dir: str | Path,
    *,
    tests: str | Path | None = None,
    testing_users: tuple[str, ...] = (),
) -> None:
    """Fail naming every problem of the package at ``package_dir`` (``src/omni_mine``):

    - an import of omni-core past its public faces (the package's ``testing`` modules and the
      test files under ``tests`` may use the test kit ``omni_core.testing`` too, nothing else may);
    - an import cycle among its modules;
    - a module outside its ``testing`` modules that imports one of them, except the modules
      named in ``testing_users`` (relative to the package: ``("bench",)`` for benchmark
      workloads, which build their checkpoints with the tiny builders).
    """
    from omni_core.testing.faces import non_face_imports

    package_dir = Path(package_dir)
    package = package_dir.name
    graph = import_graph(package_dir)
    paths = _modules(package_dir)
    allowed = {f"{package}.{name}" for name in testing_users}
    problems = non_face_imports(
        [path for module, path in paths.items() if not _is_testing(module)], test_kit=False
    )
    kit_users = [path for module, path in paths.items() if _is_testing(module)]
    if tests is not None:
        kit_users += sorted(Path(tests).rglob("*.py"))
    problems += non_face_imports(kit_users, test_kit=True)
    problems += [" <-> ".join(cycle) + " import each other" for cycle in import_cycles(package_dir)]
    for module, deps in graph.items():
        if _is_testing(module) or module in allowed:
            continue
        problems += [
            f"{paths[module]}:{line} imports {dep}, a testing module"
            for dep, line in deps.items()
            if _is_testing(dep)
        ]
    if problems:
        raise AssertionError(f"{package}'s imports:\n" + "\n".join(problems))
