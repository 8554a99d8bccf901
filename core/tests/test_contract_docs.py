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
  ``omni_core.FACES`` names).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

import omni_core
from omni_core.contract.hookspecs import ALL_HOOKS
from omni_core.contract.registry import SPEC_TYPES, PipelineCapabilities

DOCS = Path(__file__).resolve().parents[2] / "sdk-docs"
PAGES = DOCS / "docs"
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
