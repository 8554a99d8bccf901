"""Autoregressive stages: the runtime that serves speech models frame by frame.

A plugin's :class:`AutoregressiveSpeechPipeline` describes its model as a chain of stages
(:mod:`omni_core.autoregressive.stages`): a decoder with a runtime-owned KV cache
(:class:`SlotCache`, transformers' ``Cache`` API), frame stages, and a codec that decodes
chunks with left context. The :class:`ARRuntime` (:mod:`omni_core.autoregressive.runtime`)
batches the decode steps of every request in flight (requests join and leave between steps),
streams audio deltas out, honours cancellation and time limits between steps, and reads device
values back only when it hands out a chunk. Plugins reach all of it through ``omni_core``'s
top-level names. Importing this package is cheap: names resolve on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_LAZY = {
    "ARRuntime": "omni_core.autoregressive.runtime",
    "SpeechStream": "omni_core.autoregressive.runtime",
    "SlotCache": "omni_core.autoregressive.cache",
    "CacheFullError": "omni_core.autoregressive.cache",
    "ARState": "omni_core.autoregressive.stages",
    "StepOutput": "omni_core.autoregressive.stages",
    "DecoderStage": "omni_core.autoregressive.stages",
    "FrameStage": "omni_core.autoregressive.stages",
    "ChunkDecoder": "omni_core.autoregressive.stages",
    "ChunkSchedule": "omni_core.autoregressive.stages",
    "SpeechStages": "omni_core.autoregressive.stages",
    "AutoregressiveSpeechPipeline": "omni_core.autoregressive.pipeline",
}

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.autoregressive.cache import CacheFullError, SlotCache
    from omni_core.autoregressive.pipeline import AutoregressiveSpeechPipeline
    from omni_core.autoregressive.runtime import ARRuntime, SpeechStream
    from omni_core.autoregressive.stages import (
        ARState,
        ChunkDecoder,
        ChunkSchedule,
        DecoderStage,
        FrameStage,
        SpeechStages,
        StepOutput,
    )


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'omni_core.autoregressive' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ARRuntime",
    "ARState",
    "AutoregressiveSpeechPipeline",
    "CacheFullError",
    "ChunkDecoder",
    "ChunkSchedule",
    "DecoderStage",
    "FrameStage",
    "SlotCache",
    "SpeechStages",
    "SpeechStream",
    "StepOutput",
]
