"""LoRA adapters for Stable Audio's DiT, through diffusers' own PEFT integration.

diffusers' ``StableAudioDiTModel`` does not inherit its ``PeftAdapterMixin`` (so it has no
``load_lora_adapter`` / ``set_adapters`` / ``fuse_lora``), and diffusers' ``StableAudioPipeline``
has no LoRA loader. :class:`StableAudioLoraDiT` adds the mixin and nothing else: the same
modules, weights and forward (it loads the checkpoint's ``transformer`` folder as the plain
class does), so the core's ``AdapterSet`` drives it like every other family's denoiser.

There is no community-format converter for this family: a file is read as diffusers/PEFT keys
(what ``peft.get_peft_model_state_dict`` gives on the diffusers model, ``transformer.``-prefixed
or not). A key that names no module of the DiT is refused at load, with the file's name, rather
than silently dropped by PEFT.

Imported only when a Stable Audio pipeline loads (it imports diffusers).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from diffusers import StableAudioDiTModel
from diffusers.loaders import PeftAdapterMixin

from omni_core import ConfigError

#: The prefix of the DiT's keys in a pipeline-level LoRA file (diffusers' convention).
PREFIX = "transformer."


class StableAudioLoraDiT(PeftAdapterMixin, StableAudioDiTModel):
    """``StableAudioDiTModel`` with diffusers' PEFT methods (see the module docstring)."""


def lora_reader(transformer: Any) -> Callable[[Path], tuple[dict[str, Any], Any]]:
    """The ``read`` of ``AdapterSet.load`` for ``transformer``: a safetensors file's tensors,
    ``transformer.``-prefixed, and its ``lora_adapter_metadata`` header (the LoraConfig diffusers
    writes; without it PEFT takes ``lora_alpha = r``, a scale of 1 per module). ConfigError
    naming the file when a key names no module of ``transformer``."""
    # The layers a LoRA can wrap (a wrapped one, if adapters are loaded: its base_layer)
    leaves = {
        name.removesuffix(".base_layer")
        for name, module in transformer.named_modules()
        if not any(module.children())
    }

    def read(path: Path) -> tuple[dict[str, Any], Any]:
        from safetensors import safe_open
        from safetensors.torch import load_file

        with safe_open(str(path), framework="pt") as handle:
            raw = (handle.metadata() or {}).get("lora_adapter_metadata")
        state_dict = {k.removeprefix(PREFIX): v for k, v in load_file(str(path)).items()}
        stray = [k for k in state_dict if ".lora_" not in k or k.split(".lora_")[0] not in leaves]
        if stray or not state_dict:
            raise ConfigError(
                f"lora: {path}: {len(stray)} of {len(state_dict)} keys name no module of Stable "
                f"Audio's DiT (first: {', '.join(stray[:3]) or 'none'}); a file holds diffusers/"
                "PEFT keys such as transformer.transformer_blocks.0.attn1.to_q.lora_A.weight"
            )
        metadata = json.loads(raw) if raw else None
        return {PREFIX + k: v for k, v in state_dict.items()}, metadata

    return read


__all__ = ["StableAudioLoraDiT", "lora_reader"]
