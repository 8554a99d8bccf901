"""The Python API: ``Omni(model).generate(...)``, and the one model loader behind it.

``omni generate``, ``omni serve`` and the server load models through :class:`Omni` (and find
them with :func:`locate_model` before loading, to fail fast); requests are built by
:mod:`omni_core.contract.requests`, the one request path of the Python API, the CLI and the server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_core.contract.config import (
    AttentionConfig,
    CacheConfig,
    ParallelConfig,
    QuantizationConfig,
    as_lora_config,
    as_memory_config,
)
from omni_core.contract.config import as_section as _as_config
from omni_core.contract.dtypes import parse_dtype
from omni_core.contract.errors import ConfigError, InvalidRequestError
from omni_core.contract.pipeline import (
    Pipeline,
    PipelineOptions,
    StagedPipeline,
    StreamedPipeline,
)
from omni_core.contract.requests import build_request, split_keywords
from omni_core.contract.types import AudioChunk, GenerationRequest, GenerationResult
from omni_core.runtime.staged import ProgressFn
from omni_core.speech.pipeline import SpeechPipeline

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

    import torch

    from omni_core.chat.api import MessageLike
    from omni_core.contract.messages import ChatDelta
    from omni_core.contract.platforms import Platform
    from omni_core.contract.registry import PipelineSpec, Registry


def resolve_model_reference(
    model: str | Path, pipeline: str | None = None, registry: Any = None
) -> tuple[str | Path, dict[str, Any]]:
    """``(model, extra Omni keywords)`` after speech pipelines had a chance to claim ``model``.

    References without a checkpoint config (the ``piper`` alias, a Piper voice folder or
    ``.onnx`` file) are mapped by :func:`omni_core.speech.resolve_speech_model` to a folder plus
    ``pipeline=``/``default_voice=``. That lookup imports the speech pipeline classes, so it only
    runs when it can matter: no pipeline chosen, and ``model`` is either a registered speech
    pipeline's name (``piper``, ``piper:default``) or a local path without ``model_index.json`` /
    ``config.json``. Checkpoint folders and Hub ids go straight to the normal lookup.
    """
    if pipeline is not None:
        return model, {}
    ref = str(model)
    path = Path(ref).expanduser()
    if path.is_dir():
        if (path / "model_index.json").exists() or (path / "config.json").exists():
            return model, {}
    elif not path.is_file():
        if registry is None:
            from omni_core.contract.host import get_registry

            registry = get_registry()
        speech = {s.name for s in registry.pipelines.values() if s.modality == "speech"}
        if ref.split(":", 1)[0] not in speech:
            return model, {}
    from omni_core.speech.lookup import resolve_speech_model

    resolved, kwargs = resolve_speech_model(ref, registry)
    return (resolved if kwargs else model), kwargs


@dataclass(frozen=True)
class ModelLocation:
    """Where a model reference loads from and which registered pipeline serves it."""

    path: Path
    spec: PipelineSpec
    #: Loading options the reference implies (a speech voice folder's ``default_voice``).
    options: dict[str, Any] = field(default_factory=dict)


def locate_model(
    model: str | Path,
    pipeline: str | None = None,
    *,
    revision: str | None = None,
    registry: Registry | None = None,
) -> ModelLocation:
    """Find ``model`` (folder, Hub id or speech reference) and its pipeline, loading nothing.

    :class:`Omni` loads what this finds; ``omni serve`` and ``omni generate`` call it first so
    a wrong model fails in a second, before a port is bound or weights are read.
    """
    from omni_core.runtime.loading import find_pipeline, resolve_model_path

    if registry is None:
        from omni_core.contract.host import get_registry

        registry = get_registry()
    ref, claimed = resolve_model_reference(model, pipeline, registry)
    pipeline = claimed.pop("pipeline", pipeline)
    path = resolve_model_path(ref, revision=revision)
    return ModelLocation(path, find_pipeline(registry, path, pipeline), claimed)


def check_load_options(spec: PipelineSpec, options: Mapping[str, Any]) -> None:
    """Refuse loading options that neither ``spec``'s pipeline nor acceleration reads.

    An unknown key would be passed on and ignored (``quantisation=fp8`` loading unquantised),
    so it is a ConfigError naming it and what is understood, before any weight is read.
    """
    import difflib

    from omni_core.diffusion.acceleration import LOAD_OPTIONS as ACCELERATION_OPTIONS

    known = {**ACCELERATION_OPTIONS, **spec.load().load_options}
    unknown = sorted(k for k in options if k not in known)
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, list(known), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(
            f"option {key!r}: pipeline {spec.name!r} has no such loading option; {hint}"
            f"known: {', '.join(sorted(known))}"
        )


def resolve_device(device: Any, platform: Platform) -> torch.device:
    """``device`` checked against this machine (ConfigError naming it), else the platform's first.

    ``cpu`` is always there; any other device must be of the selected platform's type and
    exist, so ``--device cuda`` on a CPU-only torch is a one-line error, not a traceback from
    deep inside the first weight copy.
    """
    import torch

    if device is None:
        return platform.device(0)
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        here = "cpu" if platform.device_type == "cpu" else f"cpu, {platform.device_type}:0"
        raise ConfigError(
            f"device: {device!r} is not a device (devices here: {here}; see `omni doctor`)"
        ) from None
    if resolved.type == "cpu":
        return resolved
    if resolved.type != platform.device_type:
        here = "cpu" if platform.device_type == "cpu" else f"cpu, {platform.device_type}"
        raise ConfigError(
            f"device: {device!r} is not available on this machine: it runs the "
            f"{platform.name} platform (devices: {here}; see `omni doctor`)"
        )
    count = platform.device_count()
    if resolved.index is not None and resolved.index >= count:
        raise ConfigError(
            f"device: {device!r} does not exist: the {platform.name} platform has {count} "
            f"device{'s' if count != 1 else ''}"
        )
    return resolved


class Omni:
    """Load a model through the installed plugins and generate with it.

    ``model`` is a local checkpoint folder or a Hugging Face Hub id. The checkpoint's
    ``model_index.json`` ``_class_name`` (or ``config.json`` ``architectures``) picks the
    registered pipeline; ``pipeline=`` overrides. ``device`` and ``dtype`` default to the
    selected platform's first device and bf16 there (float32 on cpu).

    ``lora`` preloads adapters (``{name: path}``, ``["NAME=PATH:SCALE"]``, a LoraConfig) that
    requests select (``lora=``), ``fuse_lora`` merges one; ``offload``, ``max_gpu_memory``
    (GiB) and ``vae_tiling`` trade speed for device memory (sdk-docs: memory.md). ``fp8``
    turns on fp8 linears and fp8 attention on the heavy roles (lossy; sdk-docs: acceleration.md).
    """

    def __init__(
        self,
        model: str | Path,
        *,
        pipeline: str | None = None,
        device: str | None = None,
        dtype: Any = None,
        attention: str | dict[str, Any] | AttentionConfig | None = None,
        cache: str | dict[str, Any] | CacheConfig | None = None,
        quantization: str | dict[str, Any] | QuantizationConfig | None = None,
        cfg_parallel_size: int = 1,
        ulysses_degree: int = 1,
        revision: str | None = None,
        lora: Any = None,
        fuse_lora: str | None = None,
        offload: Any = None,
        max_gpu_memory: float | None = None,
        vae_tiling: str | bool | None = None,
        fp8: bool = False,
        **options: Any,
    ) -> None:
        from omni_core.contract.attention import AttentionRouter
        from omni_core.contract.host import get_registry
        from omni_core.contract.platforms import current_platform
        from omni_core.diffusion.acceleration.offload import check_memory_taken, resolve_memory

        registry = get_registry()
        platform = current_platform()
        location = locate_model(model, pipeline, revision=revision, registry=registry)
        check_load_options(location.spec, options)  # the caller's; the lookup's own are known
        for key, value in location.options.items():
            options.setdefault(key, value)
        self.path = location.path
        self.spec = location.spec
        self.model_id = str(model)
        attention_config = _as_config(attention, AttentionConfig, "attention")
        quantization_config = _as_config(quantization, QuantizationConfig, "quantization")
        if fp8:  # fp8 linears + fp8 attention on the heavy roles, as plain configs
            from omni_core.contract.fp8_mode import apply_fp8_mode

            attention_config, quantization_config = apply_fp8_mode(
                attention_config, quantization_config, self.spec, registry, platform
            )
        torch_dtype = parse_dtype(dtype, "float32" if platform.device_type == "cpu" else "bfloat16")
        parallel = ParallelConfig(
            cfg_parallel_size=cfg_parallel_size, ulysses_degree=ulysses_degree
        )
        self.options = PipelineOptions(
            device=resolve_device(device, platform),
            dtype=torch_dtype,
            platform=platform,
            attention=AttentionRouter.build(attention_config, registry, platform),
            attention_config=attention_config,
            cache=_as_config(cache, CacheConfig, "cache"),
            quantization=quantization_config,
            parallel=parallel,
            lora=as_lora_config(lora, fuse_lora),
            memory=resolve_memory(
                as_memory_config(offload, max_gpu_memory, vae_tiling), self.path, torch_dtype
            ),
            extra=options,
            spec=self.spec,
            registry=registry,
        )
        t0 = time.perf_counter()
        if parallel.cfg_parallel_size * parallel.ulysses_degree > 1:
            check_memory_taken(None, self.options)  # not in a parallel layout yet
            # One worker process per device runs the pipeline in lock-step; this process
            # drives it through the same staged protocol (omni_core.diffusion.distributed).
            if device:
                raise ConfigError(
                    "device: cannot be combined with cfg_parallel_size/ulysses_degree "
                    "(rank r uses the platform's device r)"
                )
            from omni_core.diffusion.distributed.pipeline import ParallelPipeline

            self.pipeline: Pipeline = ParallelPipeline.launch(
                self.path,
                self.spec,
                parallel,
                platform=platform,
                dtype=str(self.options.dtype).removeprefix("torch."),
                attention=attention_config,
                cache=self.options.cache,
                quantization=self.options.quantization,
                extra=options,
            )
        else:
            cls = self.spec.load()
            self.pipeline = cls.from_pretrained(self.path, self.options)
            self.pipeline.spec = self.spec
            check_memory_taken(self.pipeline, self.options)
        self.load_s = time.perf_counter() - t0

    @property
    def healthy(self) -> bool:
        """False once a parallel worker group died (a local pipeline is always healthy)."""
        return self.pipeline.healthy

    def close(self) -> None:
        """Stop parallel workers, if any (idempotent; a local pipeline needs nothing)."""
        self.pipeline.close()

    def chat(self, messages: str | Sequence[MessageLike], **kwargs: Any) -> GenerationResult:
        """Chat models: the whole answer to ``messages`` (:func:`omni_core.chat.api.chat`):
        ``text``, ``audio`` (with ``modalities=["text", "audio"]``), ``info["usage"]``."""
        from omni_core.chat.api import chat

        result = chat(self.pipeline, messages, **kwargs)
        result.timings["load_s"] = self.load_s
        return result

    def chat_stream(
        self, messages: str | Sequence[MessageLike], **kwargs: Any
    ) -> Iterator[ChatDelta]:
        """Chat models: the answer's deltas as they are made
        (:func:`omni_core.chat.api.chat_stream`)."""
        from omni_core.chat.api import chat_stream

        return chat_stream(self.pipeline, messages, **kwargs)

    def __enter__(self) -> Omni:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, prompt: str | None = None, **kwargs: Any) -> GenerationRequest:
        """Build and validate a request: shared fields by name, the rest become extras.

        ``extras={...}`` is merged with the other unknown keywords (it holds pipeline-specific
        fields only: a shared field such as ``seed`` inside it is refused, so it cannot be
        silently ignored or shadow the keyword). ``request_id=`` names the request.
        """
        request_id = kwargs.pop("request_id", None)
        shared, extras = split_keywords(kwargs)
        if prompt is not None:
            shared["prompt"] = prompt
        return build_request(self.pipeline, shared, extras=extras, request_id=request_id)

    def generate(
        self,
        prompt: str | None = None,
        *,
        progress: ProgressFn | None = None,
        should_cancel: Callable[[str], bool] | None = None,
        **kwargs: Any,
    ) -> GenerationResult:
        """Generate one output; see :class:`GenerationRequest` for the shared arguments.

        ``progress(request_id, done, total)`` is called after every denoising step;
        ``should_cancel(request_id)`` is asked between steps (raise-free cancellation:
        :class:`~omni_core.runtime.staged.Cancelled` is raised out of this call).
        """
        request = self.request(prompt, **kwargs)
        (result,) = self.run([request], progress=progress, should_cancel=should_cancel)
        return result

    def generate_batch(
        self,
        requests: list[dict[str, Any]],
        *,
        progress: ProgressFn | None = None,
        should_cancel: Callable[[str], bool] | None = None,
    ) -> list[GenerationResult]:
        """Several requests at once: compatible ones share every denoising step."""
        built = [self.request(**dict(r)) for r in requests]
        return self.run(built, progress=progress, should_cancel=should_cancel)

    def run(
        self,
        requests: list[GenerationRequest],
        *,
        progress: ProgressFn | None = None,
        should_cancel: Callable[[str], bool] | None = None,
    ) -> list[GenerationResult]:
        """Run already validated requests (see :meth:`request`) with timings and peak memory."""
        from omni_core.runtime.staged import run_to_completion

        platform = self.options.platform
        platform.reset_peak_memory(self.options.device)
        t0 = time.perf_counter()
        if isinstance(self.pipeline, StreamedPipeline):
            results = [self.pipeline.collect(r) for r in requests]
        elif isinstance(self.pipeline, StagedPipeline):
            results = run_to_completion(
                self.pipeline, requests, progress=progress, should_cancel=should_cancel
            )
        else:  # pragma: no cover - a pipeline of an unknown kind
            raise TypeError(f"{type(self.pipeline).__name__} is neither staged nor streamed")
        total = time.perf_counter() - t0
        peak = platform.memory_stats(self.options.device).get("peak_allocated_bytes")
        for result in results:
            result.timings["total_s"] = total
            result.timings.setdefault("load_s", self.load_s)
            if peak is not None:
                result.peak_memory_bytes = peak
        return results

    def stream(self, prompt: str | None = None, **kwargs: Any) -> Iterator[AudioChunk]:
        """Speech only: yield delta audio chunks as they are generated."""
        if not isinstance(self.pipeline, SpeechPipeline):
            raise InvalidRequestError(f"{self.spec.name} does not produce speech", param="model")
        return self.pipeline.stream(self.request(prompt, **kwargs))
