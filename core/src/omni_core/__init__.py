"""omni-core: the plugin SDK and runtime of omni. ``import omni_core`` is the whole public SDK.

Everything a plugin author needs is a name in :data:`__all__`: the hook marker, the specs a hook
registers, the pipeline base classes (the typed contract the core reads), the request/result
types, the acceleration and parallelism entry points, the benchmark workload base and the
errors. Modules not reached through these names are internal and may change in any release.

Importing this package is cheap on purpose (no torch, no pydantic): every name except the hook
marker and the versions resolves lazily on first access, so ``omni --help`` and
``omni list-plugins`` stay fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from omni_core.hookspecs import hookimpl

__version__ = "0.2.0"

#: The plugin API version. A plugin declares the version it was built for as a module attribute
#: ``OMNI_PLUGIN_API = "2.0"``; plugins of another major version are reported and not loaded.
#: 2.0 (omni-core 0.2): denoiser knowledge is registered (``omni_register_denoisers``), the
#: pipeline base classes declare every member the core reads, benchmarks are registered.
PLUGIN_API_VERSION = "2.0"

#: Public name -> ``"module:attr"``; resolved on first access.
_LAZY: dict[str, str] = {
    # the Python API
    "Omni": "omni_core.api:Omni",
    # specs registered through the hooks
    "Availability": "omni_core.registry:Availability",
    "PipelineSpec": "omni_core.registry:PipelineSpec",
    "PipelineCapabilities": "omni_core.registry:PipelineCapabilities",
    "AttentionBackendSpec": "omni_core.registry:AttentionBackendSpec",
    "CacheBackendSpec": "omni_core.registry:CacheBackendSpec",
    "QuantizerSpec": "omni_core.registry:QuantizerSpec",
    "PlatformSpec": "omni_core.registry:PlatformSpec",
    "DenoiserSpec": "omni_core.registry:DenoiserSpec",
    "BenchmarkSpec": "omni_core.registry:BenchmarkSpec",
    # the pipeline contract
    "Pipeline": "omni_core.pipelines.base:Pipeline",
    "StagedPipeline": "omni_core.pipelines.base:StagedPipeline",
    "SpeechPipeline": "omni_core.pipelines.base:SpeechPipeline",
    "StreamingSpeechPipeline": "omni_core.audio.speech:StreamingSpeechPipeline",
    "DenoiseState": "omni_core.pipelines.base:DenoiseState",
    "PipelineOptions": "omni_core.pipelines.base:PipelineOptions",
    "GenerationRequest": "omni_core.pipelines.base:GenerationRequest",
    "GenerationResult": "omni_core.pipelines.base:GenerationResult",
    "NoExtras": "omni_core.pipelines.base:NoExtras",
    "AudioChunk": "omni_core.pipelines.base:AudioChunk",
    "Voice": "omni_core.pipelines.base:Voice",
    "ReferenceVoice": "omni_core.pipelines.base:ReferenceVoice",
    "PreparedVoice": "omni_core.pipelines.base:PreparedVoice",
    # autoregressive speech: stages, the runtime-owned cache, the runtime
    "ARRuntime": "omni_core.autoregressive.runtime:ARRuntime",
    "SpeechStream": "omni_core.autoregressive.runtime:SpeechStream",
    "SlotCache": "omni_core.autoregressive.cache:SlotCache",
    "ARState": "omni_core.autoregressive.stages:ARState",
    "StepOutput": "omni_core.autoregressive.stages:StepOutput",
    "DecoderStage": "omni_core.autoregressive.stages:DecoderStage",
    "FrameStage": "omni_core.autoregressive.stages:FrameStage",
    "ChunkDecoder": "omni_core.autoregressive.stages:ChunkDecoder",
    "ChunkSchedule": "omni_core.autoregressive.stages:ChunkSchedule",
    "SpeechStages": "omni_core.autoregressive.stages:SpeechStages",
    "AutoregressiveSpeechPipeline": (
        "omni_core.autoregressive.pipeline:AutoregressiveSpeechPipeline"
    ),
    # chat: conversations in, text and speech out (thinker + talker on one runtime)
    "ChatPipeline": "omni_core.chat.pipeline:ChatPipeline",
    "AutoregressiveChatPipeline": "omni_core.chat.pipeline:AutoregressiveChatPipeline",
    "ChatMessage": "omni_core.chat.types:ChatMessage",
    "ChatPart": "omni_core.chat.types:ChatPart",
    "ChatDelta": "omni_core.chat.types:ChatDelta",
    "ChatUsage": "omni_core.chat.types:ChatUsage",
    "ChatRuntime": "omni_core.autoregressive.chat_runtime:ChatRuntime",
    "ChatStream": "omni_core.autoregressive.chat_runtime:ChatStream",
    "TextStage": "omni_core.autoregressive.text:TextStage",
    "TextState": "omni_core.autoregressive.text:TextState",
    "TextStages": "omni_core.autoregressive.text:TextStages",
    "TokenOutput": "omni_core.autoregressive.text:TokenOutput",
    "ReplyBuffer": "omni_core.autoregressive.text:ReplyBuffer",
    "SpeechFollower": "omni_core.autoregressive.text:SpeechFollower",
    "Sampling": "omni_core.autoregressive.sampling:Sampling",
    "sample_tokens": "omni_core.autoregressive.sampling:sample_tokens",
    "apply_repetition_penalty": "omni_core.autoregressive.sampling:apply_repetition_penalty",
    # static-shape decode steps replayed as CUDA graphs
    "GraphRunner": "omni_core.autoregressive.graphs:GraphRunner",
    "StaticSlotView": "omni_core.autoregressive.graphs:StaticSlotView",
    "StaticKVCache": "omni_core.autoregressive.graphs:StaticKVCache",
    "bucket_for": "omni_core.autoregressive.graphs:bucket_for",
    "batch_buckets": "omni_core.autoregressive.graphs:batch_buckets",
    "key_bucket": "omni_core.autoregressive.graphs:key_bucket",
    # building blocks for pipelines
    "ScheduleTable": "omni_core.pipelines.schedule:ScheduleTable",
    "route_attention": "omni_core.pipelines.diffusers_attention:route_attention",
    "dtype_kwargs": "omni_core.pipelines.diffusers_utils:dtype_kwargs",
    "resolve_model_path": "omni_core.pipelines.loading:resolve_model_path",
    "split_sentences": "omni_core.audio.speech:split_sentences",
    "resolve_speech_model": "omni_core.audio.speech:resolve_speech_model",
    # what the core knows about a denoiser class (registered by its model plugin)
    "DenoiserAdapter": "omni_core.denoisers:DenoiserAdapter",
    "SequencePlan": "omni_core.denoisers:SequencePlan",
    # acceleration and parallelism
    "apply_acceleration": "omni_core.acceleration:apply_acceleration",
    "AccelerationReport": "omni_core.acceleration:AccelerationReport",
    "cache_key": "omni_core.acceleration:cache_key",
    "QuantReport": "omni_core.acceleration.quantization:QuantReport",
    "parallelize_denoiser": "omni_core.distributed.parallelize:parallelize_denoiser",
    # memory: LoRA adapters, offload, VAE tiling
    "AdapterSet": "omni_core.acceleration.lora:AdapterSet",
    "LoraRef": "omni_core.pipelines.base:LoraRef",
    "apply_offload": "omni_core.acceleration.offload:apply_offload",
    "load_device": "omni_core.acceleration.offload:load_device",
    "VaeMemory": "omni_core.acceleration.vae_tiling:VaeMemory",
    "activation_bytes": "omni_core.acceleration.vae_tiling:activation_bytes",
    # platforms and kernels
    "Platform": "omni_core.platforms:Platform",
    "CudaPlatform": "omni_core.platforms:CudaPlatform",
    "sdpa": "omni_core.kernels.sdpa:sdpa",
    # benchmarks
    "Workload": "omni_core.benchmark:Workload",
    # the server, for deployment plugins (e.g. omni-ray runs it inside each replica)
    "ServerConfig": "omni_core.serving.config:ServerConfig",
    "StorageConfig": "omni_core.serving.stores.config:StorageConfig",
    "RetentionPolicy": "omni_core.serving.stores.config:RetentionPolicy",
    "create_app": "omni_core.serving.app:create_app",
    # errors
    "OmniError": "omni_core.errors:OmniError",
    "ConfigError": "omni_core.errors:ConfigError",
    "InvalidRequestError": "omni_core.errors:InvalidRequestError",
    "ModelNotFoundError": "omni_core.errors:ModelNotFoundError",
    "PlatformError": "omni_core.errors:PlatformError",
    "PluginError": "omni_core.errors:PluginError",
}

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.acceleration import AccelerationReport, apply_acceleration, cache_key
    from omni_core.acceleration.lora import AdapterSet
    from omni_core.acceleration.offload import apply_offload, load_device
    from omni_core.acceleration.quantization import QuantReport
    from omni_core.acceleration.vae_tiling import VaeMemory, activation_bytes
    from omni_core.api import Omni
    from omni_core.audio.speech import (
        StreamingSpeechPipeline,
        resolve_speech_model,
        split_sentences,
    )
    from omni_core.autoregressive import (
        ARRuntime,
        ARState,
        AutoregressiveSpeechPipeline,
        ChunkDecoder,
        ChunkSchedule,
        DecoderStage,
        FrameStage,
        SpeechStages,
        SpeechStream,
        StepOutput,
    )
    from omni_core.autoregressive.cache import SlotCache
    from omni_core.autoregressive.graphs import (
        GraphRunner,
        StaticKVCache,
        StaticSlotView,
        batch_buckets,
        bucket_for,
        key_bucket,
    )
    from omni_core.benchmark import Workload
    from omni_core.denoisers import DenoiserAdapter, SequencePlan
    from omni_core.distributed.parallelize import parallelize_denoiser
    from omni_core.errors import (
        ConfigError,
        InvalidRequestError,
        ModelNotFoundError,
        OmniError,
        PlatformError,
        PluginError,
    )
    from omni_core.kernels.sdpa import sdpa
    from omni_core.pipelines.base import (
        AudioChunk,
        DenoiseState,
        GenerationRequest,
        GenerationResult,
        LoraRef,
        NoExtras,
        Pipeline,
        PipelineOptions,
        PreparedVoice,
        ReferenceVoice,
        SpeechPipeline,
        StagedPipeline,
        Voice,
    )
    from omni_core.pipelines.diffusers_attention import route_attention
    from omni_core.pipelines.diffusers_utils import dtype_kwargs
    from omni_core.pipelines.loading import resolve_model_path
    from omni_core.pipelines.schedule import ScheduleTable
    from omni_core.platforms import CudaPlatform, Platform
    from omni_core.registry import (
        AttentionBackendSpec,
        Availability,
        BenchmarkSpec,
        CacheBackendSpec,
        DenoiserSpec,
        PipelineCapabilities,
        PipelineSpec,
        PlatformSpec,
        QuantizerSpec,
    )
    from omni_core.serving.app import create_app
    from omni_core.serving.config import ServerConfig
    from omni_core.serving.stores.config import RetentionPolicy, StorageConfig


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'omni_core' has no attribute {name!r}")
    module, attr = target.split(":")
    value = getattr(import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "PLUGIN_API_VERSION",
    "ARRuntime",
    "ARState",
    "AccelerationReport",
    "AdapterSet",
    "AttentionBackendSpec",
    "AudioChunk",
    "AutoregressiveChatPipeline",
    "AutoregressiveSpeechPipeline",
    "Availability",
    "BenchmarkSpec",
    "CacheBackendSpec",
    "ChatDelta",
    "ChatMessage",
    "ChatPart",
    "ChatPipeline",
    "ChatRuntime",
    "ChatStream",
    "ChatUsage",
    "ChunkDecoder",
    "ChunkSchedule",
    "ConfigError",
    "CudaPlatform",
    "DecoderStage",
    "DenoiseState",
    "DenoiserAdapter",
    "DenoiserSpec",
    "FrameStage",
    "GenerationRequest",
    "GenerationResult",
    "GraphRunner",
    "InvalidRequestError",
    "LoraRef",
    "ModelNotFoundError",
    "NoExtras",
    "Omni",
    "OmniError",
    "Pipeline",
    "PipelineCapabilities",
    "PipelineOptions",
    "PipelineSpec",
    "Platform",
    "PlatformError",
    "PlatformSpec",
    "PluginError",
    "PreparedVoice",
    "QuantReport",
    "QuantizerSpec",
    "ReferenceVoice",
    "ReplyBuffer",
    "RetentionPolicy",
    "Sampling",
    "ScheduleTable",
    "SequencePlan",
    "ServerConfig",
    "SlotCache",
    "SpeechFollower",
    "SpeechPipeline",
    "SpeechStages",
    "SpeechStream",
    "StagedPipeline",
    "StaticKVCache",
    "StaticSlotView",
    "StepOutput",
    "StorageConfig",
    "StreamingSpeechPipeline",
    "TextStage",
    "TextStages",
    "TextState",
    "TokenOutput",
    "VaeMemory",
    "Voice",
    "Workload",
    "__version__",
    "activation_bytes",
    "apply_acceleration",
    "apply_offload",
    "apply_repetition_penalty",
    "batch_buckets",
    "bucket_for",
    "cache_key",
    "create_app",
    "dtype_kwargs",
    "hookimpl",
    "key_bucket",
    "load_device",
    "parallelize_denoiser",
    "resolve_model_path",
    "resolve_speech_model",
    "route_attention",
    "sample_tokens",
    "sdpa",
    "split_sentences",
]
