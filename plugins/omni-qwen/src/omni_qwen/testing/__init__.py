"""Tiny random-weight checkpoints of every omni-qwen family, in the real layouts, for tests,
benchmarks and demos (no network; seeded, so two builds of one variant have equal weights).

- :func:`build_tiny_qwen_image` (``path, variant="t2i" | "edit" | "edit-plus"``): the diffusers
  layout of Qwen-Image / -Edit / -Edit-2509 (:mod:`.qwen_image`);
- :func:`build_tiny_qwen3_tts` (``path, kind, size="1b7"``): the official Qwen3-TTS layout
  (:mod:`.qwen3_tts`);
- :func:`build_tiny_qwen25_omni` and :func:`build_tiny_qwen3_omni` (``path``): the official
  Qwen2.5-Omni and Qwen3-Omni layouts (:mod:`.qwen25_omni`, :mod:`.qwen3_omni`);
- :func:`write_tiny_tokenizer`: the byte-level BPE tokenizer files they share (:mod:`.bpe`).

One module per family; the constants a test compares against (speakers, prefixes) are in it.
Nothing outside this package imports it except the benchmark workloads (:mod:`omni_qwen.bench`),
which build their checkpoints here too. Importing the package is cheap: a builder's module (and
torch) is imported when the builder is first used.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .bpe import write_tiny_tokenizer
    from .qwen3_omni import build_tiny_qwen3_omni
    from .qwen3_tts import build_tiny_qwen3_tts
    from .qwen25_omni import build_tiny_qwen25_omni
    from .qwen_image import build_tiny_qwen_image

#: Public name -> the module of this package that defines it.
_WHERE = {
    "build_tiny_qwen_image": "qwen_image",
    "build_tiny_qwen3_tts": "qwen3_tts",
    "build_tiny_qwen25_omni": "qwen25_omni",
    "build_tiny_qwen3_omni": "qwen3_omni",
    "write_tiny_tokenizer": "bpe",
}
__all__ = [
    "build_tiny_qwen3_omni",
    "build_tiny_qwen3_tts",
    "build_tiny_qwen25_omni",
    "build_tiny_qwen_image",
    "write_tiny_tokenizer",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return list(__all__)
