"""Tiny random LoRA adapters for tests, saved in diffusers' LoRA safetensors format.

::

    from omni_core.testing.lora import build_tiny_lora
    build_tiny_lora(transformer, tmp / "style.safetensors", save=SomePipeline.save_lora_weights)

``transformer`` is a freshly loaded diffusers model (it gets a PEFT adapter for the time of the
call, removed again); ``save`` is the model family's diffusers ``save_lora_weights``, so the
file is exactly what diffusers writes (``transformer.``-prefixed keys and the adapter config in
the ``lora_adapter_metadata`` header). ``metadata`` adds header keys (a distill's
``omni.num_inference_steps``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

#: The attention projections of diffusers' transformers that LoRAs usually train.
DEFAULT_TARGETS = ("to_q", "to_k", "to_v", "to_out.0")


def build_tiny_lora(
    transformer: Any,
    path: str | Path,
    *,
    save: Callable[..., Any],
    rank: int = 4,
    seed: int = 0,
    std: float = 0.05,
    target_modules: Sequence[str] = DEFAULT_TARGETS,
    metadata: Mapping[str, str] | None = None,
    dtype: Any = None,
) -> Path:
    """Write a random rank-``rank`` LoRA of ``transformer``'s ``target_modules`` to ``path``
    (``std``-scaled normal weights, ``lora_alpha = rank``, tensors in ``dtype``, default fp32)."""
    import torch
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dtype = dtype or torch.float32
    config = LoraConfig(
        r=rank, lora_alpha=rank, target_modules=list(target_modules), init_lora_weights=False
    )
    name = "omni-tiny-lora"
    transformer.add_adapter(config, adapter_name=name)
    try:
        # Fresh host tensors of the adapter's shapes (so a model built on the meta device,
        # e.g. a benchmark's 20B transformer, works the same as a loaded tiny one).
        generator = torch.Generator("cpu").manual_seed(seed)
        shapes = get_peft_model_state_dict(transformer, adapter_name=name)
        layers = {
            k: (torch.randn(v.shape, generator=generator) * std).to(dtype)
            for k, v in shapes.items()
        }
        save(
            str(path.parent),
            transformer_lora_layers=layers,
            weight_name=path.name,
            transformer_lora_adapter_metadata=config.to_dict(),
        )
    finally:
        transformer.delete_adapters(name)
    if metadata:
        _add_header(path, metadata)
    return path


def _add_header(path: Path, extra: Mapping[str, str]) -> None:
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(str(path), framework="pt") as handle:
        header = dict(handle.metadata() or {})
    header.update({k: str(v) for k, v in extra.items()})
    save_file(load_file(str(path)), str(path), metadata=header)


def lora_header(path: str | Path) -> dict[str, Any]:
    """The safetensors header metadata of a LoRA file (the adapter config parsed)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        header = dict(handle.metadata() or {})
    raw = header.get("lora_adapter_metadata")
    if raw:
        header["lora_adapter_metadata"] = json.loads(raw)
    return header


__all__ = ["DEFAULT_TARGETS", "build_tiny_lora", "lora_header"]
