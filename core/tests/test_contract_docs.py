"""Everything a plugin author relies on is documented in sdk-docs (datasette's model: a hook,
field or contract member added without docs fails here, naming the page it belongs on).

Pages and what each must mention (as code: an inline ``code`` span or a fenced block):

- ``hooks.md``: every hook in ``omni_core.contract.hookspecs.ALL_HOOKS`` (hand-written); every
  field of every spec class in ``omni_core.contract.registry.SPEC_TYPES`` and of
  ``PipelineCapabilities`` (the page as built: the tables are generated from the code by
  ``sdk-docs/hooks_reference.py``);
- ``write-a-model-plugin.md``: every public member declared on the contract's classes
  (:data:`CONTRACT_CLASSES`: ``Pipeline``, the staged and streamed shapes, the lanes' bases) and
  on ``DenoiserAdapter``, ``SequencePlan`` and the benchmark ``Workload``;
- ``sdk.md``: every name of every face (``omni_core.__all__`` and the ``__all__`` of each face
  ``omni_core.FACES`` names);
- ``architecture.md``: every package of ``omni_core`` (a folder with an ``__init__.py``, at any
  depth, as ``path/``) and every top-level module (``api.py``), and no module path that does not
  exist.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import re
import warnings
from pathlib import Path
from types import ModuleType

import pytest

import omni_core
from omni_core.contract.hookspecs import ALL_HOOKS
from omni_core.contract.registry import SPEC_TYPES, PipelineCapabilities

DOCS = Path(__file__).resolve().parents[2] / "sdk-docs"
PAGES = DOCS / "docs"
CORE = Path(omni_core.__file__).resolve().parent
_FENCE = re.compile(r"```.*?```", re.S)
_SPAN = re.compile(r"`([^`\n]+)`")


def _code(text: str) -> str:
    """The code of a markdown page: its fenced blocks and inline code spans."""
    blocks = _FENCE.findall(text)
    spans = _SPAN.findall(_FENCE.sub("", text))
    return "\n".join(blocks + spans)


def _missing(names: list[str], page: str, *, rendered: bool = False) -> list[str]:
    text = (PAGES / page).read_text(encoding="utf-8")
    if rendered:
        text = _render(text)
    code = _code(text)
    return [n for n in names if not re.search(rf"(?<![\w]){re.escape(n)}(?![\w])", code)]


def _render(markdown: str) -> str:
    spec = importlib.util.spec_from_file_location("omni_docs_hooks", DOCS / "hooks_reference.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks.on_page_markdown(markdown)


def _public(cls: type) -> list[str]:
    """Members ``cls`` itself declares (not inherited), without private names."""
    names = [n for n in vars(cls) if not n.startswith("_")]
    names += [n for n in getattr(cls, "__annotations__", {}) if not n.startswith("_")]
    if dataclasses.is_dataclass(cls):
        names += [f.name for f in dataclasses.fields(cls)]
    return sorted(set(names))


def test_every_hook_is_documented_on_the_hooks_page() -> None:
    assert _missing(list(ALL_HOOKS), "hooks.md") == []


def test_every_spec_field_is_documented_on_the_hooks_page() -> None:
    models = [*SPEC_TYPES.values(), PipelineCapabilities]
    fields = sorted({f for m in models for f in m.model_fields if f != "plugin"})
    assert _missing(fields, "hooks.md", rendered=True) == []
    # Each spec class has its own section (title) there.
    titles = _render((PAGES / "hooks.md").read_text(encoding="utf-8"))
    for model in models:
        assert f"`{model.__name__}`" in titles, model.__name__


def _faces() -> dict[str, ModuleType]:
    """Every face by name: ``omni_core`` and the subpackages ``omni_core.FACES`` lists."""
    faces: dict[str, ModuleType] = {"omni_core": omni_core}
    for name in omni_core.FACES:
        faces[f"omni_core.{name}"] = importlib.import_module(f"omni_core.{name}")
    return faces


def _face_name(name: str) -> object:
    """The public object ``name`` from the face that lists it (never a deprecated spelling)."""
    for face in _faces().values():
        if name in face.__all__:
            return getattr(face, name)
    raise LookupError(f"no face lists {name!r}")


#: The classes whose every public member the author guide documents.
CONTRACT_CLASSES = [
    "Pipeline",
    "StagedPipeline",
    "StreamedPipeline",
    "SharedRuntime",
    "PolledStream",
    "AutoregressivePipeline",
    "SpeechPipeline",
    "DenoiserAdapter",
    "SequencePlan",
    "Workload",
]


@pytest.mark.parametrize("cls", CONTRACT_CLASSES)
def test_every_contract_member_is_documented_in_the_author_guide(cls: str) -> None:
    value = _face_name(cls)
    assert isinstance(value, type), cls
    members = _public(value)
    assert members, cls
    assert _missing(members, "write-a-model-plugin.md") == [], cls


@pytest.mark.parametrize("face", ["omni_core", *(f"omni_core.{n}" for n in omni_core.FACES)])
def test_every_public_sdk_name_is_documented_on_the_sdk_page(face: str) -> None:
    module = _faces()[face]
    assert module.__all__, face
    assert _missing(list(module.__all__), "sdk.md") == [], face


def _packages() -> list[str]:
    """Every package of omni_core as ``path/`` (``templates`` holds no code) and every
    top-level module as ``name.py``."""
    packages = [
        f"{init.parent.relative_to(CORE).as_posix()}/"
        for init in sorted(CORE.rglob("__init__.py"))
        if init.parent != CORE and "templates" not in init.relative_to(CORE).parts
    ]
    modules = [p.name for p in sorted(CORE.glob("*.py")) if p.name != "__init__.py"]
    return packages + modules


#: A path in a code span or block: ``serving/routes/``, ``runtime/engine.py``, ``api.py``.
_PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)+(?:[\w-]+\.py)?|[\w-]+\.py)(?![\w/.-])")
#: Paths of the repository outside omni_core that architecture.md may name.
_OUTSIDE = ("core/tests/", "tests/", "plugins/", "sdk-docs/", "demo/", "bench/results/")


def test_the_architecture_page_names_every_package() -> None:
    code = _code((PAGES / "architecture.md").read_text(encoding="utf-8"))
    named = set(_PATH.findall(code))
    assert [p for p in _packages() if p not in named] == []


def _resolves(dotted: str) -> bool:
    """``omni_core.a.b`` is a module, or a name its longest module prefix has (no warning)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.util.find_spec(".".join(parts[:cut]))
        except ModuleNotFoundError:
            found = None
        if found is None:
            continue
        value: object = importlib.import_module(".".join(parts[:cut]))
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            for name in parts[cut:]:
                try:
                    value = getattr(value, name)
                except (AttributeError, DeprecationWarning):
                    return False
        return True
    return False


def test_the_architecture_page_names_only_paths_that_exist() -> None:
    code = _code((PAGES / "architecture.md").read_text(encoding="utf-8"))
    wrong = []
    for path in sorted(set(_PATH.findall(code))):
        if path.startswith(_OUTSIDE):
            continue
        inside = path.removeprefix("core/src/").removeprefix("omni_core/")
        if not (CORE / inside).exists():
            wrong.append(path)
    assert wrong == [], f"not under {CORE}: {wrong}"
    dotted = sorted(set(re.findall(r"(?<![\w.])omni_core(?:\.\w+)+", code)))
    assert dotted, "the page names the faces (omni_core.diffusion, ...)"
    assert [name for name in dotted if not _resolves(name)] == []


def test_docs_name_no_removed_api() -> None:
    """No page tells authors to use an API 2.0 removed (the migration notes on
    compatibility.md name them on purpose)."""
    removed = [
        "register_cache_adapter",
        "register_sequence_plan",
        "CacheAdapter",
        "cache_adapter",
        "default_fps",
        "auto_parallelize",
        "pipeline_cls",
        "omni_core.builtins.attention",
        "bench_pipeline",
    ]
    found = []
    for page in sorted(PAGES.glob("*.md")):
        if page.name == "compatibility.md":
            continue
        text = page.read_text(encoding="utf-8")
        for name in removed:
            for line_no, line in enumerate(text.splitlines(), 1):
                if re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", line):
                    found.append(f"{page.name}:{line_no} {name}")
    assert found == []


def test_every_page_is_in_the_nav() -> None:
    nav = (DOCS / "mkdocs.yml").read_text(encoding="utf-8")
    assert [p.name for p in sorted(PAGES.glob("*.md")) if p.name not in nav] == []
