"""The pieces every published request body is made of (:mod:`omni_core.serving.openapi_bodies`):
string patterns the server holds every string to, the fields of a body model as JSON schemas,
the foreign fields a model accepts and ignores (from the compatibility tables), and one model's
branch of a body (``model`` its id, nothing else allowed).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from omni_core.serving import compat, probes
from omni_core.serving.compat_rules import TABLES

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.serving.state import ServerState

#: A string without NUL characters; and one that is not blank either.
NUL_FREE = "^[^\\x00]*$"
NOT_BLANK = "^[^\\x00]*[^\\s\\x00][^\\x00]*$"
#: The image types uploads and data URLs may hold.
IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp")
#: ``format`` of a string holding an image as a base64 data URL (``data:image/png;base64,..``).
IMAGE_DATA_URL = "image-data-url"
#: Other names of omni's fields (compat renames), said beside the field.
ALIASES = {
    "n": ["num_outputs_per_prompt"],
    "size": ["width + height"],
    "guidance_scale": ["true_cfg_scale"],
    "input_reference": ["image_reference"],
    "max_tokens": ["max_completion_tokens"],
}


def field_schemas(model: type[BaseModel]) -> dict[str, dict[str, Any]]:
    """Each field of a body model as its JSON schema (``None`` branches dropped)."""
    schema = model.model_json_schema()
    out = {}
    for name, prop in schema.get("properties", {}).items():
        plain = probes.non_null(prop)
        out[name] = {k: v for k, v in plain.items() if k not in ("title", "default")}
    return out


def no_nul(schema: Any) -> Any:
    """``schema`` with every free string held free of NUL characters (the server refuses
    them): a string without a pattern, enum or format gets :data:`NUL_FREE`."""
    if isinstance(schema, list):
        return [no_nul(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: no_nul(v) for k, v in schema.items()}
    if out.get("type") == "string" and not {"pattern", "enum", "const", "format"} & set(out):
        out["pattern"] = NUL_FREE
    if "additionalProperties" in out and isinstance(out["additionalProperties"], dict):
        out.setdefault("propertyNames", {"pattern": NUL_FREE})
    return out


def ignored_fields(endpoint: str, pipeline: Any) -> dict[str, dict[str, Any]]:
    """The foreign fields this model accepts and ignores (reported), with their types."""
    declared = compat.declared_fields(pipeline)
    out: dict[str, dict[str, Any]] = {}
    for name, rule in TABLES[endpoint].items():
        if rule.action != "ignore" or rule.type is None or rule.probe:
            continue
        if (rule.native and name in declared) or (rule.honoured and rule.honoured(pipeline)):
            continue  # the pipeline's own: published with its fields
        schema = rule.schema()
        schema["description"] = f"Accepted and ignored (X-Omni-Ignored-Fields): {rule.why}."
        out[name] = schema
    return out


def model_branch(
    model_id: str, props: dict[str, dict[str, Any]], required: Iterable[str], one: bool
) -> dict[str, Any]:
    """One model's body: its properties, ``model`` its id (optional when it is the only one)."""
    props = {"model": {"type": "string", "enum": [model_id]}, **props}
    required = [*(() if one else ("model",)), *required]
    for name, alias in ALIASES.items():
        if name in props:
            props[name] = {**props[name], "x-omni-aliases": alias}
    return no_nul(
        {
            "type": "object",
            "title": model_id,
            "properties": props,
            "required": sorted(set(required), key=required.index),
            "additionalProperties": False,
        }
    )


def limits_note(state: ServerState) -> str:
    cost = state.config.max_cost
    return (
        f" Width x height x frames x steps x outputs must stay within {cost:,} pixel-steps "
        "(--max-cost)."
        if cost
        else ""
    )
