"""The pipeline contract: staged diffusion (prepare / step / decode) and streamed speech.

The engine, not the model, owns the loop. A diffusion pipeline only says how to start a request
(:meth:`StagedPipeline.prepare`), how to advance a batch of compatible requests by one denoising
step (:meth:`StagedPipeline.step`) and how to turn the final latents into pixels
(:meth:`StagedPipeline.decode`). That is what lets step-level batching, progress, cancellation,
caching and parallelism live in one place instead of in every model.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from omni_core.config import (
    AttentionConfig,
    CacheConfig,
    LoraConfig,
    MemoryConfig,
    ParallelConfig,
    QuantizationConfig,
)
from omni_core.errors import InvalidRequestError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch
    from PIL import Image

    from omni_core.acceleration.lora import AdapterSet
    from omni_core.attention import AttentionRouter
    from omni_core.autoregressive.runtime import ARRuntime
    from omni_core.platforms import Platform
    from omni_core.registry import PipelineSpec


class NoExtras(BaseModel):
    """Extras model of a pipeline that takes none: any extra is an error."""

    model_config = ConfigDict(extra="forbid")


class LoraRef(BaseModel):
    """One LoRA adapter a request asks for, by the name it was loaded under (``--lora``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=128)
    #: None: the scale the adapter was loaded with (``--lora NAME=PATH:SCALE``, default 1).
    scale: float | None = Field(None, ge=-10.0, le=10.0)


@dataclass
class PreparedVoice:
    """What a speech pipeline made of a reference voice once (:meth:`SpeechPipeline.prepare_voice`):
    tensors (a speaker embedding, prompt codes) and JSON-able facts; the server stores both with
    an uploaded voice so that later requests (and restarts) skip the preparation."""

    tensors: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class ReferenceVoice:
    """A voice to clone: reference audio (float32 mono at ``sample_rate``) and its transcript,
    and/or what the pipeline prepared from them (``prepared``: set for uploaded voices)."""

    audio: Any = None  # np.ndarray
    sample_rate: int | None = None
    transcript: str | None = None
    prepared: PreparedVoice | None = None
    #: The uploaded voice's name (None: reference audio sent with the request).
    name: str | None = None


class GenerationRequest(BaseModel):
    """The shared request schema. Model-specific knobs go in ``extras`` (the pipeline's model)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    prompt: str = Field("", description="Text prompt (or, for speech, the text to speak).")
    negative_prompt: str | None = None
    height: int | None = Field(None, gt=0, le=8192)
    width: int | None = Field(None, gt=0, le=8192)
    num_frames: int | None = Field(None, gt=0, le=1024)
    num_inference_steps: int | None = Field(None, ge=1, le=1000)
    guidance_scale: float | None = Field(None, ge=0.0, le=100.0)
    seed: int | None = Field(None, ge=0, lt=2**63)
    num_outputs: int = Field(1, ge=1, le=16, description="Outputs per prompt (OpenAI's n).")
    images: list[Any] = Field(default_factory=list, description="Conditioning PIL images.")
    voice: str | None = None
    speed: float = Field(1.0, ge=0.25, le=4.0)
    sample_rate: int | None = Field(None, ge=8000, le=192000)
    lora: tuple[LoraRef, ...] = Field(
        (), description="LoRA adapters (loaded ones, by name) and scales for this request."
    )
    reference: ReferenceVoice | None = Field(
        None, description="Speech: a voice to clone (reference audio or an uploaded voice)."
    )
    # chat (text and omni models): the conversation, decoded (omni_core.chat.ChatMessage)
    messages: list[Any] = Field(
        default_factory=list, description="Chat: the conversation (ChatMessage objects)."
    )
    modalities: tuple[Literal["text", "audio"], ...] = Field(
        ("text",), description="Chat: what the answer holds."
    )
    max_tokens: int | None = Field(None, ge=1, le=32768, description="Chat: answer tokens.")
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="Chat: 0 is greedy.")
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0, le=100000, description="Chat: 0 keeps every token.")
    extras: dict[str, Any] = Field(default_factory=dict)
    request_id: str = Field(default_factory=lambda: uuid.uuid4().hex)

    @field_validator("lora", mode="before")
    @classmethod
    def _lora_forms(cls, value: Any) -> Any:
        """A name, one ``{name, scale}`` object (vLLM-Omni's form) or a list of either."""
        if value is None:
            return ()
        if isinstance(value, str | Mapping):
            value = [value]
        if isinstance(value, list | tuple):
            return tuple({"name": v} if isinstance(v, str) else v for v in value)
        return value

    def lora_key(self) -> tuple[tuple[str, float | None], ...]:
        """The adapters and scales as a hashable key (requests that differ never share a step)."""
        return tuple((ref.name, ref.scale) for ref in self.lora)


@dataclass
class GenerationResult:
    """What a request produced, plus how long each stage took."""

    images: list[Image.Image] | None = None
    video: np.ndarray | None = None  # frames x H x W x 3, uint8
    fps: int | None = None
    audio: np.ndarray | None = None  # float32 mono PCM in [-1, 1]
    text: str | None = None  # a chat answer's text
    sample_rate: int | None = None
    timings: dict[str, float] = field(default_factory=dict)
    peak_memory_bytes: int | None = None
    info: dict[str, Any] = field(default_factory=dict)


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
    #: LoRA adapters to load into the denoisers (:class:`~omni_core.acceleration.lora.AdapterSet`).
    lora: LoraConfig = field(default_factory=LoraConfig)
    #: Offload and VAE tiling (:mod:`omni_core.acceleration.offload`, ``vae_tiling``).
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    #: Options a pipeline understands beyond the shared ones (e.g. ``text_encoder_device``).
    extra: dict[str, Any] = field(default_factory=dict)
    #: The registered spec being loaded (its capabilities bound what acceleration may do).
    spec: PipelineSpec | None = None


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
    adapters: AdapterSet | None = None

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

    def denoisers(self) -> dict[str, Any]:
        """The denoiser modules as the pipeline runs them, by component name (default: none).

        The distributed runtime reports their sequence shards; tools find them here.
        """
        return {}

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


@dataclass
class AudioChunk:
    """A delta of audio: never cumulative."""

    samples: np.ndarray  # float32 mono
    sample_rate: int


@dataclass(frozen=True)
class Voice:
    """A voice a speech pipeline offers."""

    id: str
    name: str = ""
    language: str | None = None
    description: str = ""


class SpeechPipeline(Pipeline):
    """A speech pipeline: yields delta audio chunks as it generates them."""

    @abstractmethod
    def stream(self, request: GenerationRequest) -> Iterator[AudioChunk]:
        """Yield audio chunks; their concatenation is the non-streamed result."""

    def voices(self) -> list[Voice]:
        """The voices this loaded model offers (``GET /v1/audio/voices``)."""
        return []

    @classmethod
    def known_voices(cls) -> list[Voice] | None:
        """Voices known without loading weights (``omni voices``);
        None: only a loaded model can tell."""
        return None

    def warmup_fields(self) -> dict[str, Any]:
        """Keywords of the smallest request that runs this model end to end (the server's
        warm-up): shared fields by name, the rest extras. Models that need more than a text
        (a voice description, a reference voice) or would speak long (random test weights)
        say so here."""
        return {"prompt": "Hello."}

    #: True when :meth:`prepare_voice` works and requests may carry a ``reference`` voice.
    clones_voices: ClassVar[bool] = False

    def prepare_voice(self, voice: ReferenceVoice) -> PreparedVoice:
        """Prepare a reference voice once (``POST /v1/audio/voices``): speaker embedding, prompt
        codes, ... Requests then carry it as ``ReferenceVoice(prepared=...)``. The default
        refuses: this model cannot clone voices."""
        raise InvalidRequestError(
            f"{type(self).__name__} cannot clone voices from reference audio", param="audio"
        )

    def shared_runtime(self) -> ARRuntime | None:
        """The :class:`~omni_core.autoregressive.ARRuntime` that advances every open stream of
        this pipeline in one step (autoregressive pipelines). The engine then steps it once per
        loop iteration and polls the streams; None (the default): each stream advances alone."""
        return None
