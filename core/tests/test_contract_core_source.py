"""The core's source keeps the shape the plugin contract needs (read with ast, nothing runs).

- core/src names no model family in code (identifiers and strings; docstrings and comments
  may use them as examples): model knowledge lives in the plugin that owns the model;
- no module-level registries outside the plugin host: no ``register_*`` functions at module
  level, no module-level dict/list/set that functions fill in;
- no import cycle among core modules (module-level imports);
- no module over 400 lines unless its docstring's first paragraph says why, in a sentence
  beginning "Long because" (the convention of sdk-docs' author guide).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "omni_core"
MAX_LINES = 400

#: Model families (diffusion and speech) the core must not know about, as word sequences.
FAMILIES: tuple[tuple[str, ...], ...] = (
    ("wan",),
    ("qwen",),
    ("flux",),
    ("hunyuan",),
    ("cog", "video"),
    ("ltx",),
    ("sd", "3"),
    ("sdxl",),
    ("mochi",),
    ("pixart",),
    ("sana",),
    ("lumina",),
    ("kandinsky",),
    ("aura", "flow"),
    ("allegro",),
    ("cosmos",),
    ("hidream",),
    ("stable", "diffusion"),
    ("piper",),
    ("cosy", "voice"),
    ("fish", "speech"),
    ("vox", "cpm"),
    ("speech", "t5"),
    ("fast", "speech"),
    ("vits",),
    ("bark",),
    ("kokoro",),
    ("csm",),
    ("parler",),
)
#: Families long enough to match as a word prefix too ("qwenimage", "fluxpipeline").
PREFIX_OK = {"qwen", "flux", "hunyuan", "pixart", "kandinsky", "hidream"}
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def modules() -> list[tuple[str, str, ast.Module]]:
    return [
        (p.relative_to(SRC).as_posix(), text, ast.parse(text, filename=str(p)))
        for p in sorted(PACKAGE.rglob("*.py"))
        for text in [p.read_text(encoding="utf-8")]
    ]


def module_name(rel: str) -> str:
    return rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


def _docstring_nodes(tree: ast.Module) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def family_in(text: str) -> str | None:
    """The model family ``text`` names as a word (camelCase and digits split words)."""
    words = [w.lower() for w in _WORDS.findall(text)]
    for family in FAMILIES:
        n = len(family)
        for i in range(len(words) - n + 1):
            window = tuple(words[i : i + n])
            if window == family:
                return " ".join(family)
            if n == 1 and family[0] in PREFIX_OK and window[0].startswith(family[0]):
                return family[0]
    return None


def test_family_matching_is_a_word_match() -> None:
    assert family_in("WanTransformer3DModel") == "wan"
    assert family_in("omni_wan.denoiser:wan_adapter") == "wan"
    assert family_in("QwenImageEditPlusPipeline") == "qwen"
    assert family_in("qwenimage") == "qwen"
    assert family_in("SD3Transformer2DModel") == "sd 3"
    assert family_in("CogVideoXPipeline") == "cog video"
    for innocent in ("want", "swan", "wanted", "Transformer2DModel", "sdpa", "santa", "remark"):
        assert family_in(innocent) is None, innocent


def test_core_names_no_model_family_in_code() -> None:
    found = []
    for rel, _, tree in modules():
        docs = _docstring_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                texts = [] if id(node) in docs else [node.value]
            elif isinstance(node, ast.Name):
                texts = [node.id]
            elif isinstance(node, ast.Attribute):
                texts = [node.attr]
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                texts = [node.name]
            elif isinstance(node, ast.arg):
                texts = [node.arg]
            elif isinstance(node, ast.alias):
                texts = [node.name, node.asname or ""]
            else:
                continue
            for text in texts:
                family = family_in(text)
                if family:
                    line = getattr(node, "lineno", "?")
                    found.append(f"{rel}:{line} {family!r} in {text[:60]!r}")
    assert found == [], "model knowledge belongs in its plugin:\n" + "\n".join(found)


#: Module-level ``register_*`` functions allowed, and why.
REGISTER_FUNCTIONS_ALLOWED = {
    # The plugin-author kit registers a throwaway plugin into a host it is given: no table.
    "omni_core/testing/__init__.py": {"register_plugin"},
    # ... and its pytest fixture of the same job.
    "omni_core/testing/pytest_plugin.py": {"register_omni_plugin"},
}
#: Modules that may keep module-level state filled in by functions: the plugin host itself.
HOST_MODULES = {"omni_core/contract/host.py", "omni_core/contract/registry.py"}
#: Module-level mutable tables that are memo caches (derived, never a source of knowledge).
CACHES_ALLOWED = {
    # Generated processor subclasses, one per (processor class, role, kernel): a memo.
    ("omni_core/diffusion/attention_routing.py", "_ROUTED_CLASSES"),
}
_MUTATORS = {"append", "extend", "insert", "update", "setdefault", "add", "__setitem__"}
_MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "deque"}


def _module_tables(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        mutable = isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp)
        if isinstance(value, ast.Call):
            func = value.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            mutable = called in _MUTABLE_CALLS
        if mutable:
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_no_module_level_registries_outside_the_plugin_host() -> None:
    found = []
    for rel, _, tree in modules():
        if rel in HOST_MODULES:
            continue
        allowed = REGISTER_FUNCTIONS_ALLOWED.get(rel, set())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("register_"):
                if node.name not in allowed:
                    found.append(f"{rel}:{node.lineno} def {node.name} (a side registry)")
        tables = _module_tables(tree) - {t for r, t in CACHES_ALLOWED if r == rel}
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                target = None
                if isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
                    targets = (
                        node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
                    )
                    for t in targets:
                        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                            target = t.value.id
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in _MUTATORS
                    and isinstance(node.func.value, ast.Name)
                ):
                    target = node.func.value.id
                if target in tables:
                    found.append(f"{rel}:{node.lineno} {func.name}() writes module table {target}")
    assert found == [], "\n".join(found)


#: Calls whose result, bound at module level, is a table filled at run time (state kept beside
#: the objects that own it instead of on them).
_TABLE_CALLS = {"WeakKeyDictionary", "WeakValueDictionary", "dict", "list", "defaultdict",
                "OrderedDict"}  # fmt: skip


def test_no_module_level_state_tables() -> None:
    """``_STORES = WeakKeyDictionary()`` beside ``ServerState`` is state kept away from its
    owner: it belongs on the object (the contract report's ``module_state`` rule)."""
    found = []
    for rel, _, tree in modules():
        for node in tree.body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if not isinstance(value, ast.Call):
                continue
            func = value.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name in _TABLE_CALLS:
                found.append(f"{rel}:{node.lineno} {ast.unparse(node)[:70]}")
    assert found == [], "keep state on its owner:\n" + "\n".join(found)


def _imports(rel: str, tree: ast.Module, known: set[str]) -> set[str]:
    """omni_core modules imported at module level (``if TYPE_CHECKING`` blocks excluded)."""
    me = module_name(rel)
    package = me if rel.endswith("__init__.py") else me.rpartition(".")[0]
    out: set[str] = set()
    body: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.Try):
            body += node.body + [s for h in node.handlers for s in h.body]
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            body += node.body + node.orelse
        else:
            body.append(node)
    for node in body:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("omni_core"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            if not name.startswith("omni_core"):
                continue
            for alias in node.names:  # `from omni_core.x import y` where y is a module
                sub = f"{name}.{alias.name}"
                out.add(sub if sub in known else name)
    return {m for m in out if m in known and m != me}


def test_no_import_cycle_among_core_modules() -> None:
    parsed = modules()
    known = {module_name(rel) for rel, _, _ in parsed}
    graph = {module_name(rel): _imports(rel, tree, known) for rel, _, tree in parsed}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append([*stack[stack.index(dep) :], dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


def test_no_core_module_is_long_without_saying_why() -> None:
    long = []
    for rel, text, tree in modules():
        lines = len(text.splitlines())
        if lines <= MAX_LINES:
            continue
        first_paragraph = (ast.get_docstring(tree) or "").split("\n\n")[0]
        if "Long because" not in first_paragraph.replace("\n", " "):
            long.append(f"{rel}: {lines} lines")
    assert long == [], (
        f"modules over {MAX_LINES} lines must say why in their docstring's first paragraph "
        "(a sentence beginning 'Long because'), or be cut by job:\n" + "\n".join(long)
    )
