"""LoRA files: where an adapter comes from (a local safetensors file or folder, or the Hub via
huggingface-hub; safetensors only), how it is read by default, and the request defaults a step
distill's metadata recommends (``omni.num_inference_steps`` / ``omni.guidance_scale``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omni_core.contract.errors import ConfigError

#: Safetensors metadata keys a distill may carry: the request defaults it was trained for.
METADATA_DEFAULTS = {
    "omni.num_inference_steps": ("num_inference_steps", int),
    "omni.guidance_scale": ("guidance_scale", float),
}


def resolve_lora_file(source: str, *, revision: str | None = None) -> Path:
    """A local ``.safetensors`` file, a folder holding one, or a Hub id (``owner/name`` or
    ``owner/name/path/file.safetensors``) fetched with huggingface-hub; safetensors only."""
    path = Path(source).expanduser()
    if path.suffix in (".bin", ".pt", ".pth", ".ckpt", ".pkl"):
        raise ConfigError(f"lora: {source!r} is not a .safetensors file (safetensors only)")
    if path.is_file():
        if path.suffix != ".safetensors":
            raise ConfigError(f"lora: {source!r} is not a .safetensors file (safetensors only)")
        return path
    if path.is_dir():
        return _only_safetensors(path, source)
    parts = source.split("/")
    if source.startswith((".", "/", "~")):
        raise ConfigError(f"lora: {source!r}: no such file or folder")
    if len(parts) < 2 or not all(parts):
        raise ConfigError(f"lora: {source!r} is neither a file, a folder nor a Hub id")
    repo, filename = "/".join(parts[:2]), "/".join(parts[2:])
    if filename and not filename.endswith(".safetensors"):
        raise ConfigError(f"lora: {source!r} is not a .safetensors file (safetensors only)")
    try:
        from huggingface_hub import hf_hub_download, snapshot_download

        if filename:
            return Path(hf_hub_download(repo, filename, revision=revision))
        folder = snapshot_download(repo, revision=revision, allow_patterns=["*.safetensors"])
    except Exception as exc:  # noqa: BLE001 - offline, unknown repo, no such file
        raise ConfigError(f"lora: cannot fetch {source!r} from the Hub: {exc}") from None
    return _only_safetensors(Path(folder), source)


def _only_safetensors(folder: Path, source: str) -> Path:
    files = sorted(folder.rglob("*.safetensors"))
    preferred = [f for f in files if f.name == "pytorch_lora_weights.safetensors"]
    if preferred:
        return preferred[0]
    if len(files) != 1:
        found = ", ".join(str(f.relative_to(folder)) for f in files) or "none"
        raise ConfigError(
            f"lora: {source!r} must hold exactly one .safetensors file (found: {found}); "
            "name the file"
        )
    return files[0]


def read_safetensors_lora(path: Path) -> tuple[dict[str, Any], Any]:
    """The default ``read``: the file's tensors as they are, and diffusers' adapter metadata."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as handle:
        header = handle.metadata() or {}
    raw = header.get("lora_adapter_metadata")
    return load_file(str(path)), (json.loads(raw) if raw else None)


def file_defaults(path: Path) -> dict[str, Any]:
    """Request defaults a distill's safetensors metadata recommends (``METADATA_DEFAULTS``)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        header = handle.metadata() or {}
    out: dict[str, Any] = {}
    for key, (name, kind) in METADATA_DEFAULTS.items():
        if key in header:
            try:
                out[name] = kind(header[key])
            except ValueError:
                raise ConfigError(f"lora: {path}: metadata {key}={header[key]!r}") from None
    return out


def fused_defaults(lora: Mapping[str, Any]) -> dict[str, Any]:
    """The request defaults of the adapter a LoraConfig dict fuses, before loading anything:
    its ``steps`` / ``guidance_scale``, else the file's metadata (empty: nothing fused)."""
    fuse = lora.get("fuse")
    entry = next((a for a in lora.get("adapters", ()) if a["name"] == fuse), None)
    if entry is None:
        return {}
    defaults = file_defaults(resolve_lora_file(entry["path"]))
    if lora.get("steps") is not None:
        defaults["num_inference_steps"] = lora["steps"]
    if lora.get("guidance_scale") is not None:
        defaults["guidance_scale"] = lora["guidance_scale"]
    return defaults


__all__ = [
    "METADATA_DEFAULTS",
    "file_defaults",
    "fused_defaults",
    "read_safetensors_lora",
    "resolve_lora_file",
]
