"""Find a checkpoint (local folder or Hub id) and the registered pipeline that serves it."""

from __future__ import annotations

import json
from pathlib import Path

from omni_core.contract.errors import ModelNotFoundError
from omni_core.contract.registry import PipelineSpec, Registry


def resolve_model_path(
    model: str | Path, *, revision: str | None = None, cache_dir: str | None = None
) -> Path:
    """A local folder as is; anything else as a Hub id through huggingface-hub.

    huggingface-hub's cache and offline mode (``HF_HUB_OFFLINE=1``) are honoured: offline, a
    cached snapshot is used and a missing one is a clear error instead of a download attempt.
    Only safetensors weights and configs are fetched.
    """
    path = Path(model).expanduser()
    if path.is_dir():
        return path.resolve()
    model_id = str(model)
    if path.exists() or model_id.count("/") != 1 or model_id.startswith((".", "/", "~")):
        raise ModelNotFoundError(f"model {model_id!r}: no such folder, and not a Hub id (org/name)")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError as exc:  # pragma: no cover - a runtime dependency
        raise ModelNotFoundError(f"model {model_id!r}: huggingface-hub is not installed") from exc
    try:
        folder = snapshot_download(
            repo_id=model_id,
            revision=revision,
            cache_dir=cache_dir,
            allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model", "*.onnx", "*.jinja"],
        )
    except LocalEntryNotFoundError as exc:
        raise ModelNotFoundError(
            f"model {model_id!r} is not in the Hugging Face cache and downloads are off "
            "(HF_HUB_OFFLINE=1) or the Hub cannot be reached; download it first or pass a "
            "local folder"
        ) from exc
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise ModelNotFoundError(f"model {model_id!r}: {exc}") from exc
    return Path(folder)


def read_architectures(path: Path) -> list[str]:
    """Class names a checkpoint declares: diffusers ``_class_name``, else ``architectures``."""
    names: list[str] = []
    index = path / "model_index.json"
    config = path / "config.json"
    try:
        if index.is_file():
            names.append(json.loads(index.read_text())["_class_name"])
        elif config.is_file():
            names.extend(json.loads(config.read_text()).get("architectures") or [])
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ModelNotFoundError(f"{path}: unreadable model_index.json/config.json: {exc}") from exc
    return names


def find_pipeline(registry: Registry, path: Path, pipeline: str | None = None) -> PipelineSpec:
    """The pipeline that serves ``path``: ``pipeline`` if given, else by declared architecture."""
    specs = registry.pipelines
    if pipeline is not None:
        spec = specs.get(pipeline)
        if spec is None:
            raise ModelNotFoundError(
                f"unknown pipeline {pipeline!r}; installed: {', '.join(sorted(specs)) or 'none'}"
            )
        return spec
    architectures = read_architectures(path)
    if not architectures:
        raise ModelNotFoundError(
            f"{path} has neither model_index.json nor config.json with architectures; "
            "pass pipeline=NAME to choose one"
        )
    first_class = [s for s in specs.values() if not s.fallback]
    fallbacks = [s for s in specs.values() if s.fallback]
    for group in (first_class, fallbacks):
        for spec in sorted(group, key=lambda s: s.name):
            if any(a in spec.architectures for a in architectures) or (
                spec.fallback and "*" in spec.architectures and (path / "model_index.json").exists()
            ):
                return spec
    served = sorted(f"{s.name} ({', '.join(s.architectures)})" for s in first_class)
    raise ModelNotFoundError(
        f"no installed pipeline serves {', '.join(architectures)} (from {path}); installed "
        f"pipelines: {'; '.join(served) or 'none'}. Install the plugin for this model family "
        "and check `omni list-plugins`"
    )
