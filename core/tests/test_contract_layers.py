"""The core's folders are its architecture: floors, lanes and faces (read with ast, nothing runs).

- every import counts: module level, inside functions and under ``TYPE_CHECKING`` (a type hint is
  still a dependency: the two modules cannot be understood apart);
- floors: ``contract`` < ``media`` < ``runtime`` < the lanes (``diffusion``, ``speech``,
  ``chat``) < the shells (``api``, ``serving``, ``commands``, ``cli``, ``bench``, ``testing``):
  an import never points up a floor, and a lane never imports another lane. The only way up is
  the plugin host (``"module:attr"`` strings a spec names, loaded by the registry);
- the built-in plugins (``builtins``) are plugins: they import the public faces only;
- no import cycle, counting every import;
- every core package is in the table below (a new folder must say which floor it is on).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "omni_core"

#: Top-level folders and modules of omni_core, by floor (lower floors never import higher ones).
FLOORS: dict[str, int] = {
    "contract": 0,
    "media": 1,
    "runtime": 2,
    "diffusion": 3,
    "speech": 3,
    "chat": 3,
    "api": 4,
    "bench": 4,
    "cli": 4,
    "commands": 4,
    "serving": 4,
    "testing": 4,
}
LANES = {"diffusion", "speech", "chat"}
#: The public faces: what plugins (and the built-in ones) may import.
FACES = {
    "omni_core",
    "omni_core.diffusion",
    "omni_core.speech",
    "omni_core.chat",
    "omni_core.runtime",
    "omni_core.serving",
    "omni_core.bench",
    "omni_core.testing",
}


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def core_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def every_import(path: Path, known: set[str]) -> dict[str, int]:
    """omni_core modules ``path`` imports anywhere (module, function, TYPE_CHECKING) -> line."""
    text = path.read_text(encoding="utf-8")
    return imports_in(text, module_name(path), path.name == "__init__.py", known)


def imports_in(text: str, me: str, is_package: bool, known: set[str]) -> dict[str, int]:
    package = me if is_package else me.rpartition(".")[0]
    out: dict[str, int] = {}

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    for node in ast.walk(ast.parse(text)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names = [f"{base}.{a.name}" for a in node.names]
        for name in names:
            if not name.startswith("omni_core"):
                continue
            target = resolve(name)
            if target is not None and target != me:
                out.setdefault(target, node.lineno)
    return out


def floor_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def graph() -> dict[str, dict[str, int]]:
    modules = core_modules()
    known = set(modules)
    return {name: every_import(path, known) for name, path in modules.items()}


def test_every_core_folder_has_a_floor() -> None:
    tops = {floor_of(m) for m in core_modules()} - {""}
    assert tops - set(FLOORS) - {"builtins", "templates"} == set(), (
        "a new top-level package of omni_core: give it a floor in FLOORS (and a section in "
        "sdk-docs/docs/architecture.md)"
    )


def test_no_import_points_up_a_floor_or_across_lanes() -> None:
    found = []
    for module, deps in graph().items():
        mine = floor_of(module)
        if mine not in FLOORS:
            continue
        for dep, line in deps.items():
            theirs = floor_of(dep)
            if dep == "omni_core":
                if FLOORS[mine] < FLOORS["api"]:  # the top face: shells may use it
                    found.append(f"{module}:{line} imports the top-level face omni_core")
                continue
            if theirs not in FLOORS:
                found.append(f"{module}:{line} imports {dep} (a plugin: reach it by its spec)")
            elif FLOORS[theirs] > FLOORS[mine]:
                found.append(f"{module}:{line} imports {dep}, a floor up ({theirs})")
            elif mine in LANES and theirs in LANES and mine != theirs:
                found.append(f"{module}:{line} imports {dep}: lanes do not import each other")
    assert found == [], "\n".join(found)


def test_builtin_plugins_import_only_public_faces() -> None:
    found = []
    modules = core_modules()
    known = set(modules)
    for module, path in modules.items():
        if floor_of(module) != "builtins":
            continue
        for dep, line in every_import(path, known).items():
            face = dep if dep in FACES else None
            if face is None and not dep.startswith("omni_core.builtins"):
                found.append(f"{module}:{line} imports {dep}")
    assert found == [], "built-in plugins use the faces, like any plugin:\n" + "\n".join(found)


def test_no_import_cycle_counting_every_import() -> None:
    deps = {m: set(d) for m, d in graph().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(deps[v]):
            if w not in deps:
                continue
            if w not in index:
                strong(w)
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

    for v in sorted(deps):
        if v not in index:
            strong(v)
    assert cycles == [], "\n".join(" <-> ".join(c) for c in cycles)


def test_the_layer_checks_see_a_violation() -> None:
    """The checks above are not vacuous: an import inside a function under a lane, of another
    lane's module, is found and judged across lanes."""
    known = set(core_modules())
    text = "def f():\n    from omni_core.chat.runtime import ChatRuntime\n"
    deps = imports_in(text, "omni_core.speech.example", False, known)
    assert deps == {"omni_core.chat.runtime": 2}
    assert {floor_of("omni_core.speech.example"), floor_of("omni_core.chat.runtime")} <= LANES
