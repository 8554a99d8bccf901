"""Autoregressive stages: the runtime that serves speech models frame by frame.

A plugin's :class:`AutoregressiveSpeechPipeline` describes its model as a chain of stages
(:mod:`omni_core.autoregressive.stages`): a decoder with a runtime-owned KV cache
(:class:`~omni_core.autoregressive.cache.SlotCache`, transformers' ``Cache`` API), frame
stages, and a codec that decodes chunks with left context. The :class:`ARRuntime`
(:mod:`omni_core.autoregressive.runtime`) batches the decode steps of every request in flight
(requests join and leave between steps), streams audio deltas out, honours cancellation and
time limits between steps, and reads device values back only when it hands out a chunk.
Plugins reach all of it through ``omni_core``'s top-level names. Importing this package imports
neither torch nor transformers (the cache module, which needs them, is imported on first use).
"""

from __future__ import annotations

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

__all__ = [
    "ARRuntime",
    "ARState",
    "AutoregressiveSpeechPipeline",
    "ChunkDecoder",
    "ChunkSchedule",
    "DecoderStage",
    "FrameStage",
    "SpeechStages",
    "SpeechStream",
    "StepOutput",
]
