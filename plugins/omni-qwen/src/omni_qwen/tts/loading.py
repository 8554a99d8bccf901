"""Finding and reading an official Qwen3-TTS checkpoint (a folder or a Hub id), safetensors only.

A Hub id is fetched with ``huggingface_hub.snapshot_download`` restricted to the files the model
needs (configs, tokenizer files, ``*.safetensors``; never pickles), so the Hub cache, ``HF_HOME``,
``HF_HUB_OFFLINE=1`` and tokens all behave as for any Hugging Face download.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

NEEDED = [
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "preprocessor_config.json",
    "speech_tokenizer/*.json",
    "speech_tokenizer/*.safetensors",
]


class CheckpointError(ValueError):
    """The folder or Hub repo is not a Qwen3-TTS checkpoint in the official layout."""


def resolve_checkpoint(
    source: str | os.PathLike[str], revision: str | None = None, cache_dir: str | None = None
) -> Path:
    """A local folder as it is, else a Hub repo id downloaded (or found in the cache)."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if path.exists() or str(source).startswith((".", "/", "~")):
        raise CheckpointError(f"{source}: not a folder")
    from huggingface_hub import snapshot_download

    try:
        return Path(
            snapshot_download(
                str(source), revision=revision, cache_dir=cache_dir, allow_patterns=NEEDED
            )
        )
    except Exception as exc:  # hub errors: offline cache miss, unknown repo, auth
        raise CheckpointError(
            f"{source}: cannot get the checkpoint from the Hugging Face Hub ({exc})"
        ) from exc


def read_json(path: Path, required: bool = True) -> dict[str, Any] | None:
    if not path.is_file():
        if required:
            raise CheckpointError(
                f"{path.parent}: {path.name} is missing (not the official Qwen3-TTS layout)"
            )
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of ``model.safetensors`` (or its shards) in ``folder``."""
    from safetensors.torch import load_file

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (folder / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise CheckpointError(f"{folder}: no model.safetensors (only safetensors weights are read)")
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(load_file(str(folder / name)))
    return state


def load_strict(
    module: nn.Module, state: dict[str, torch.Tensor], what: str, assign: bool = False
) -> None:
    """``load_state_dict`` that names what does not fit (missing, unexpected, wrong shape)."""
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    wrong = sorted(k for k in set(own) & set(state) if tuple(own[k].shape) != tuple(state[k].shape))
    if missing or unexpected or wrong:
        parts = []
        for label, keys in (
            ("missing", missing),
            ("unexpected", unexpected),
            ("wrong shape", wrong),
        ):
            if keys:
                parts.append(f"{len(keys)} {label} (e.g. {', '.join(keys[:3])})")
        raise CheckpointError(f"{what}: weights do not fit the config: {'; '.join(parts)}")
    module.load_state_dict(state, strict=True, assign=assign)


def load_tokenizer(folder: Path) -> Any:
    """The Qwen2 text tokenizer from the checkpoint's tokenizer files (the official processor
    takes only Qwen2 tokenizers)."""
    from transformers import Qwen2Tokenizer

    try:
        return Qwen2Tokenizer.from_pretrained(str(folder))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{folder}: cannot load the text tokenizer ({exc})") from exc
