"""The pipeline contract: every member the core reads from a loaded pipeline, and the two
shapes the engine drives.

The engine, not the model, owns the loop. A :class:`StagedPipeline` (diffusion) only says how to
start a request (:meth:`~StagedPipeline.prepare`), how to advance a batch of compatible requests
by one denoising step (:meth:`~StagedPipeline.step`) and how to turn the final latents into
pixels (:meth:`~StagedPipeline.decode`). A :class:`StreamedPipeline` (speech, chat) opens a
stream of deltas per request (:meth:`~StreamedPipeline.open_stream`) and says how its deltas
make the whole result (:meth:`~StreamedPipeline.collector`); an autoregressive one also hands
the engine a :class:`SharedRuntime` that advances every open stream in one step. That is what
lets step-level batching, progress, cancellation, caching and parallelism live in one place
instead of in every model. The lanes (``omni_core.diffusion``, ``omni_core.speech``,
``omni_core.chat``) build their bases on these; nothing here knows a lane.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from omni_core.contract.config import (
    AttentionConfig,
    CacheConfig,
    LoraConfig,
    MemoryConfig,
    ParallelConfig,
    QuantizationConfig,
)
from omni_core.contract.errors import InvalidRequestError
from omni_core.contract.types import GenerationRequest, GenerationResult, NoExtras, pixel_steps

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.contract.attention import AttentionRouter
    from omni_core.contract.collect import Collector
    from omni_core.contract.platforms import Platform
    from omni_core.contract.registry import PipelineSpec, Registry

D = TypeVar("D")  # a delta a stream hands out (AudioChunk, ChatDelta)


def _host_registry() -> Registry:
    from omni_core.contract.host import get_registry

    return get_registry()


class Adapters(ABC):
    """What the core reads from a pipeline's loaded LoRA adapters (diffusion's ``AdapterSet``
    implements it): the request defaults a fused adapter recommends, the check of a request's
    ``lora`` against what is loaded, and what ``/v1/models`` shows."""

    @abstractmethod
    def request_defaults(self) -> dict[str, Any]:
        """Shared fields a request that leaves them out gets (e.g. a fused distill's steps)."""

    @abstractmethod
    def check_request(self, request: GenerationRequest) -> GenerationRequest:
        """``request`` with its ``lora`` resolved against the loaded adapters (or an
        InvalidRequestError naming the unknown one)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """The adapters as JSON (``/v1/models``)."""


@dataclass
class PipelineOptions:
    """Everything a pipeline needs to load, decided by the core before ``from_pretrained``."""

    device: torch.device
    dtype: torch.dtype
    platform: Platform
    attention: AttentionRouter | None = None
    attention_config: AttentionConfig = field(default_factory=AttentionConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    quantization: QuantizationConfig = field(default_factory=QuantizationConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    #: LoRA adapters to load into the denoisers
    #: (:class:`~omni_core.diffusion.acceleration.lora.AdapterSet`).
    lora: LoraConfig = field(default_factory=LoraConfig)
    #: Offload and VAE tiling (:mod:`omni_core.diffusion.acceleration.offload`, ``vae_tiling``).
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    #: Options a pipeline understands beyond the shared ones (e.g. ``text_encoder_device``).
    extra: dict[str, Any] = field(default_factory=dict)
    #: The registered spec being loaded (its capabilities bound what acceleration may do).
    spec: PipelineSpec | None = None
    #: The registry the pipeline is loaded from: acceleration and parallelism look their
    #: backends and denoiser facts up here (default: the process's plugin host).
    registry: Registry = field(default_factory=_host_registry)


class Pipeline(ABC):
    """What every pipeline has, and every member the core reads from one.

    This class is the whole contract between the core and a loaded pipeline: the engine, the
    server, the Python API and the distributed runtime read only the members declared here
    (each with a default), never anything else. Override what your pipeline knows better.
    """

    #: The pydantic model of this pipeline's request extras.
    extras_model: ClassVar[type[BaseModel]] = NoExtras
    #: The loading options (``PipelineOptions.extra`` keys: ``Omni(path, key=...)``,
    #: ``--option key=...``) this pipeline reads, each with what it does. The core refuses any
    #: other key (besides acceleration's own) before loading, so a typo never loads silently.
    load_options: ClassVar[Mapping[str, str]] = {}
    #: The registered spec this pipeline was loaded for (set by the core after loading).
    spec: PipelineSpec | None = None
    #: The options it was loaded with (``from_pretrained`` stores them; device and platform
    #: tell the runtime where to synchronise and measure memory). None: nothing to sync.
    options: PipelineOptions | None = None
    #: The LoRA adapters loaded into its denoisers (``AdapterSet.load`` in ``from_pretrained``);
    #: None: this pipeline takes no ``lora`` (a request naming one is refused).
    adapters: Adapters | None = None

    @classmethod
    @abstractmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> Pipeline:
        """Load from a local checkpoint folder (the core resolved Hub ids already)."""

    @classmethod
    def resolve_model(cls, model: str | Path) -> tuple[Path, str | None] | None:
        """Claim a model reference that has no checkpoint config (default: claim nothing).

        Speech pipelines whose models are not diffusers/transformers folders (a Piper voice
        folder, an ``.onnx`` file, an alias) return ``(folder, default_voice)``; the core then
        loads that folder with this pipeline.
        """
        return None

    def output_fps(self, request: GenerationRequest) -> int | None:
        """Frames per second of the video ``request`` produces (None: not a video pipeline).

        The server turns OpenAI's ``seconds`` into frames with it, so it must be the fps the
        decoded video really has.
        """
        return None

    def concurrency(self, max_batch: int) -> int:
        """Requests the engine runs at once (default ``max_batch``, the step batch size).

        Pipelines with a shared autoregressive runtime return its slots: they batch every
        request in flight, so ``--max-batch`` (diffusion step batching) must not cap them.
        """
        return max_batch

    def work_units(self, request: GenerationRequest) -> float | None:
        """How much work ``request`` is, in units whose denoising time the server measures on
        this model (default: its pixel-steps; None: no estimate). The server refuses at
        admission a request whose work x the measured seconds per unit is above
        ``--request-timeout``; override it when your work grows otherwise (Wan: latent frames).
        """
        return pixel_steps(request)

    def denoisers(self) -> dict[str, Any]:
        """The denoiser modules as the pipeline runs them, by component name (default: none).

        The distributed runtime reports their sequence shards; tools find them here.
        """
        return {}

    def warmup_fields(self) -> dict[str, Any]:
        """Keywords of the smallest request this loaded model serves end to end (the server's
        warm-up, ``omni serve`` without ``--warmup-request``): shared fields by name, the rest
        extras. It must be a request :meth:`validate` accepts on every checkpoint this pipeline
        loads. The default is one denoising step at the default size, with a grey input image
        for a pipeline that only edits; override it when a model needs more (a minimum step
        count, a voice, a conversation)."""
        fields: dict[str, Any] = {"prompt": "warm-up", "num_inference_steps": 1}
        tasks = set(self.spec.tasks) if self.spec is not None else set()
        if tasks and not tasks & {"t2i", "t2v", "t2a"}:
            from PIL import Image

            fields["images"] = [Image.new("RGB", (64, 64), (128, 128, 128))]
        return fields

    @property
    def healthy(self) -> bool:
        """False once the pipeline can no longer serve (e.g. a parallel worker died)."""
        return True

    @property
    def health_reason(self) -> str | None:
        """Why the pipeline is unhealthy (shown by ``/health``); None while healthy."""
        return None

    def close(self) -> None:
        """Release what the pipeline holds outside this process (workers); idempotent."""
        return None

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        """Check and complete ``request`` before any compute; raise InvalidRequestError.

        The default validates ``extras`` against :attr:`extras_model` and stores the parsed,
        defaulted values back. Subclasses add their own checks (sizes, frame counts, images).
        """
        try:
            extras = self.extras_model.model_validate(request.extras)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "extras"
            raise InvalidRequestError(f"extras.{where}: {first['msg']}", param=where) from None
        return request.model_copy(update={"extras": extras.model_dump()})

    @classmethod
    def precheck(cls, path: Path, request: GenerationRequest) -> GenerationRequest:
        """Validate ``request`` against the checkpoint at ``path`` *before* loading weights.

        Called by the CLI (and anyone who wants errors before a long load). The default checks
        the extras only; pipelines override it to read their configs (sizes, frame counts,
        required images) without touching weights. :meth:`validate` must accept what this does.
        """
        try:
            extras = cls.extras_model.model_validate(request.extras)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "extras"
            raise InvalidRequestError(f"extras.{where}: {first['msg']}", param=where) from None
        return request.model_copy(update={"extras": extras.model_dump()})


@dataclass
class DenoiseState:
    """One request in flight: its latents, schedule and position. Pipelines subclass it."""

    request: GenerationRequest
    num_steps: int
    step_index: int = 0
    #: Filled by the pipeline: latents, timesteps, prompt embeddings, scheduler, ...
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.step_index >= self.num_steps


class StagedPipeline(Pipeline):
    """A diffusion pipeline the engine drives one denoising step at a time."""

    @abstractmethod
    def prepare(self, request: GenerationRequest) -> DenoiseState:
        """Encode the prompt, draw the initial noise and set the timesteps.

        ``request`` has passed :meth:`validate` (the core validates every request exactly once,
        before it is queued), so its defaults are filled in and its extras are parsed: do not
        check it again here.

        Noise must be drawn exactly as the reference pipeline draws it from
        ``torch.Generator("cpu").manual_seed(request.seed)`` so seeds reproduce it.
        """

    @abstractmethod
    def step(self, states: list[DenoiseState]) -> None:
        """Advance every state by one denoising step (CFG included), in place.

        States share :meth:`batch_key`. No host synchronisation in here.
        """

    @abstractmethod
    def decode(self, state: DenoiseState) -> GenerationResult:
        """Turn finished latents into images or video."""

    def batch_key(self, state: DenoiseState) -> Hashable:
        """States with equal keys may share a :meth:`step` call. Default: never batch.

        The engine adds the request's LoRA adapters and scales to this key itself
        (:func:`step_key`): a pipeline need not.
        """
        return id(state)


def step_key(pipeline: StagedPipeline, state: DenoiseState) -> Hashable:
    """What the engine groups states by: the LoRA adapters and scales, then ``batch_key``."""
    return (state.request.lora_key(), pipeline.batch_key(state))


class SharedRuntime(ABC):
    """Advances every open stream of one pipeline in one step (an autoregressive runtime).

    The engine calls :meth:`step` once per loop iteration and then takes what each stream made
    ready with :meth:`PolledStream.poll`, so concurrent requests share decode steps.
    """

    #: Whether seeded requests may share batched work whose rounding depends on the batch (a
    #: codec call of several rows): the engine sets it from the server's ``--batch-seeded``.
    #: False (the default): a seed gives the same bytes alone or under load.
    batch_seeded: bool = False

    @abstractmethod
    def step(self) -> None:
        """Advance every open stream by one step (cancellations and deadlines first)."""

    def allow_seeded_batches(self, allow: bool) -> None:
        """Set :attr:`batch_seeded` (a runtime that owns others passes it on)."""
        self.batch_seeded = allow


class PolledStream(Iterator[D], ABC):
    """A stream of a :class:`SharedRuntime`: deltas made ready by its steps.

    Iterating it steps the runtime until the next delta (the single-request path); the engine
    steps the runtime itself and takes ready deltas with :meth:`poll`.
    """

    #: True once the last delta was made ready.
    finished: bool = False
    #: Why the stream failed (raised by iteration; the engine fails the request with it).
    error: BaseException | None = None

    @abstractmethod
    def poll(self) -> list[D]:
        """The deltas ready now (never blocks, never steps)."""

    @abstractmethod
    def cancel(self, reason: str = "cancelled by the client") -> None:
        """Leave at the next step boundary with a RequestCancelledError."""

    @abstractmethod
    def close(self) -> None:
        """Leave the runtime now (between steps), freeing what the request held."""


class StreamedPipeline(Pipeline, Generic[D]):
    """A pipeline whose answer is a stream of deltas: speech (``AudioChunk``) or chat
    (``ChatDelta``). The lanes' bases (``omni_core.speech.SpeechPipeline``,
    ``omni_core.chat.ChatPipeline``) implement these members; a plugin implements theirs."""

    @abstractmethod
    def open_stream(self, request: GenerationRequest) -> Iterator[D]:
        """The deltas of one validated request, as they are made."""

    @abstractmethod
    def collector(self, started: float | None = None) -> Collector[D]:
        """What gathers this pipeline's deltas into the whole :class:`GenerationResult`."""

    def shared_runtime(self) -> SharedRuntime | None:
        """The runtime that advances every open stream of this pipeline in one step; the engine
        then steps it once per loop iteration and polls the streams (which are then
        :class:`PolledStream` objects). None (the default): each stream advances alone."""
        return None

    def collect(self, request: GenerationRequest) -> GenerationResult:
        """Run one request to its whole result without an engine."""
        gather = self.collector()
        stream = self.open_stream(request)
        try:
            for delta in stream:
                gather.add(delta)
        finally:
            close_stream(stream)
        return gather.result()


def close_stream(stream: Iterator[Any]) -> None:
    """Free what an unfinished stream holds: a runtime slot, or a generator's frame."""
    if isinstance(stream, PolledStream):
        stream.close()
    elif isinstance(stream, Generator):
        stream.close()
