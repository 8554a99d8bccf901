"""mkdocs hook: generate the hook reference and tables from the code, so docs cannot drift.

Markers replaced in pages:

- ``<!-- omni:hookspecs -->``: every hook in core/src/omni_core/contract/hookspecs.py (signature
  and docstring), read with ``ast`` so building the docs imports nothing from omni.
- ``<!-- omni:specs -->``: the fields of every spec model (needs omni-core importable).
- ``<!-- omni:capabilities -->``: the fields of ``PipelineCapabilities``.
- ``<!-- omni:config-env -->``: every ``OMNI_*`` configuration variable.
"""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HOOKSPECS = ROOT / "core" / "src" / "omni_core" / "contract" / "hookspecs.py"


def _ensure_core_importable() -> None:
    try:
        import omni_core  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(ROOT / "core" / "src"))


def hook_reference() -> str:
    tree = ast.parse(HOOKSPECS.read_text(encoding="utf-8"))
    out = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        if not any(ast.unparse(d) == "hookspec" for d in node.decorator_list):
            continue
        args = ", ".join(
            f"{a.arg}: {ast.unparse(a.annotation)}" if a.annotation else a.arg
            for a in node.args.args
        )
        returns = f" -> {ast.unparse(node.returns)}" if node.returns else ""
        doc = inspect.cleandoc(ast.get_docstring(node) or "(undocumented)")
        signature = f"@hookimpl\ndef {node.name}({args}){returns}"
        out.append(f"### `{node.name}`\n\n```python\n{signature}\n```\n\n{doc}\n")
    if not out:
        raise RuntimeError(f"no hookspecs found in {HOOKSPECS}")
    return "\n".join(out)


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or repr(annotation).replace("typing.", "")
    return text.replace("|", "\\|")


def _field_table(model: Any, common: set[str]) -> list[str]:
    out = ["| field | type | default | description |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        if name == "plugin":
            continue
        if field.is_required():
            default = "required"
        else:
            default = f"`{field.get_default(call_default_factory=True)!r}`"
        inherited = " (all specs)" if name in common else ""
        description = (field.description or "").replace("\n", " ").replace("|", "\\|")
        kind_type = _type_name(field.annotation)
        out.append(f"| `{name}` | `{kind_type}` | {default} | {description}{inherited} |")
    return out


def spec_reference() -> str:
    _ensure_core_importable()
    from omni_core.contract.registry import SPEC_TYPES, Spec

    out = []
    for kind, model in SPEC_TYPES.items():
        doc = inspect.cleandoc(model.__doc__ or "")
        out.append(f"### `{model.__name__}` ({kind})\n\n{doc}\n")
        out += _field_table(model, set(Spec.model_fields))
        out.append("")
    return "\n".join(out)


def capabilities_reference() -> str:
    _ensure_core_importable()
    from omni_core.contract.registry import PipelineCapabilities

    doc = inspect.cleandoc(PipelineCapabilities.__doc__ or "")
    return "\n".join(
        [f"### `PipelineCapabilities`\n\n{doc}\n", *_field_table(PipelineCapabilities, set()), ""]
    )


def config_env_reference() -> str:
    _ensure_core_importable()
    from omni_core.commands.config_files import env_names

    rows = ["| variable | setting |", "|---|---|"]
    for name, (section, key) in sorted(env_names().items()):
        rows.append(f"| `{name}` | `{section}.{key}` |")
    return "\n".join(rows)


GENERATORS = {
    "<!-- omni:hookspecs -->": hook_reference,
    "<!-- omni:specs -->": spec_reference,
    "<!-- omni:capabilities -->": capabilities_reference,
    "<!-- omni:config-env -->": config_env_reference,
}


def on_page_markdown(markdown: str, **_: Any) -> str:
    for marker, generate in GENERATORS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    return markdown
