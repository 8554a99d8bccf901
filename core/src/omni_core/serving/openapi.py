"""OpenAPI request bodies of the routes that parse their bodies by hand (JSON and/or multipart),
so clients, docs and fuzzers (schemathesis) still see what each route takes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel


def body_spec(
    model: type[BaseModel],
    *,
    multipart: bool,
    json_body: bool,
    files: dict[str, bool],
    model_ids: Iterable[str],
) -> dict[str, Any]:
    """``openapi_extra`` of a route: its body as ``model`` (JSON) and/or a form with ``files``
    (name -> several files?). ``model`` is documented as the enum of the served ids."""
    content: dict[str, Any] = {}
    schema = model.model_json_schema()
    schema.pop("$defs", None)
    if "model" in schema.get("properties", {}):
        schema["properties"]["model"] = {
            "type": "string",
            "enum": list(model_ids),
            "description": "A model id from /v1/models.",
        }
    if json_body:
        content["application/json"] = {"schema": schema}
    if multipart:
        props = {
            k: v
            for k, v in schema.get("properties", {}).items()
            if k not in files and "anyOf" not in v
        }
        for name in schema.get("properties", {}):
            if name not in files and name not in props:
                props[name] = {"type": "string"}
        for name, many in files.items():
            binary = {"type": "string", "format": "binary"}
            props[name] = {"type": "array", "items": binary} if many else binary
        required = [r for r in schema.get("required", []) if r in props]
        required += [n for n, many in files.items() if many]
        content["multipart/form-data"] = {
            "schema": {"type": "object", "properties": props, "required": required}
        }
    return {"requestBody": {"required": True, "content": content}}
