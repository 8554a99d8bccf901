"""Typed, frozen specs that plugins register, and the registry that holds them.

A spec describes a thing a plugin provides and points at its implementation lazily
(``"package.module:attr"``): building the registry imports no torch, so listing plugins is fast.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from omni_core.contract.errors import RegistrationError

_NAME_PATTERN = r"^[a-z0-9][a-z0-9_.\-]*$"
_REF_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$"

Task = Literal["t2i", "i2i", "t2v", "i2v", "ti2v", "t2a", "tts", "chat"]


def load_object(reference: str) -> Any:
    """Import ``"package.module:attr"`` (attr may be dotted) and return the attribute."""
    module_name, _, attr_path = reference.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    return obj


class Availability(BaseModel):
    """Whether something can run on this machine, and why not when it cannot."""

    model_config = ConfigDict(frozen=True)

    available: bool
    reason: str = ""

    @classmethod
    def yes(cls, reason: str = "") -> Availability:
        return cls(available=True, reason=reason)

    @classmethod
    def no(cls, reason: str) -> Availability:
        return cls(available=False, reason=reason)


class Spec(BaseModel):
    """Common fields of every registered spec."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ClassVar[str] = "spec"

    name: str = Field(pattern=_NAME_PATTERN, description="Unique name within its kind.")
    implementation: str = Field(pattern=_REF_PATTERN, description='Lazy "module:attr" reference.')
    description: str = ""
    overrides: bool = Field(
        default=False,
        description="Replace a spec of the same name registered by another plugin (e.g. a "
        "vendor-optimised kernel). Without it, a second registration of a name is an error.",
    )
    #: Set by the core at registration time: the plugin that registered this spec.
    plugin: str | None = None

    def load(self) -> Any:
        """Import and return the implementation."""
        return load_object(self.implementation)


class PipelineCapabilities(BaseModel):
    """What the engine may do with a pipeline."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step_batching: bool = Field(False, description="step() accepts several compatible states.")
    cfg_parallel: bool = False
    sequence_parallel: bool = False
    streaming: bool = Field(False, description="Speech: stream() yields audio while generating.")
    cache_backends: tuple[str, ...] = ()
    quantizers: tuple[str, ...] = ()
    heavy_attention_roles: tuple[Literal["self", "cross", "joint"], ...] = Field(
        ("self", "joint"),
        description="Attention roles that dominate the cost (long key sequences): the fp8 mode "
        "puts fp8 attention on these and leaves the others (short text keys) exact.",
    )


class PipelineSpec(Spec):
    """A model pipeline: which tasks and checkpoint architectures it serves, and how."""

    kind: ClassVar[str] = "pipelines"

    tasks: tuple[Task, ...] = Field(min_length=1)
    architectures: tuple[str, ...] = Field(
        default=(),
        description="diffusers model_index.json `_class_name` or transformers `architectures` "
        "values this pipeline serves.",
    )
    extras: str | None = Field(
        default=None,
        pattern=_REF_PATTERN,
        description='Lazy "module:Model" reference to a pydantic model of request extras.',
    )
    capabilities: PipelineCapabilities = PipelineCapabilities()
    fallback: bool = Field(
        default=False,
        description="A generic adapter: used only when no first-class pipeline claims the "
        "checkpoint.",
    )
    default_model: str | None = Field(
        default=None,
        description="The model reference this pipeline serves when a request of its modality "
        "names none (a speech pipeline's installed default voice); the pipeline's "
        "resolve_model claims it.",
    )

    @property
    def modality(self) -> Literal["image", "video", "audio", "speech", "chat"]:
        if "chat" in self.tasks:
            return "chat"
        if "tts" in self.tasks:
            return "speech"
        if "t2a" in self.tasks:  # text to audio (sound, music): POST /v1/audio/generate
            return "audio"
        if any(t in self.tasks for t in ("t2v", "i2v", "ti2v")):
            return "video"
        return "image"


class AttentionBackendSpec(Spec):
    """An attention kernel: ``fn(q, k, v, *, attn_mask=None, scale=None)`` on [B, S, H, D]."""

    kind: ClassVar[str] = "attention_backends"

    device_types: tuple[str, ...] = Field(
        min_length=1, description="Device types it runs on (cpu, cuda, npu, ...)."
    )
    availability: str | None = Field(
        default=None,
        pattern=_REF_PATTERN,
        description='Lazy "module:func" returning an Availability; None means always available.',
    )
    supports_mask: bool = True
    priority: int = Field(0, description="Higher wins when the backend is 'auto'.")
    lossy: bool = Field(
        False,
        description="Approximates exact attention (quantized, sparse): 'auto' never picks it; "
        "it runs only where named, or on the heavy roles of the fp8 mode.",
    )
    precision: str = Field(
        "native",
        pattern=_NAME_PATTERN,
        description="What its matmuls compute in: 'native' (the inputs' dtype), 'fp8', 'int8'. "
        "The fp8 mode (`Omni(fp8=True)`) picks the best usable 'fp8' backend.",
    )


class CacheBackendSpec(Spec):
    """A step cache that skips or reuses denoiser work across steps."""

    kind: ClassVar[str] = "cache_backends"

    lossy: bool = True
    availability: str | None = Field(default=None, pattern=_REF_PATTERN)


class QuantizerSpec(Spec):
    """A quantizer applied to one pipeline component (the denoiser's linears by default)."""

    kind: ClassVar[str] = "quantizers"

    device_types: tuple[str, ...] = ("cuda",)
    lossy: bool = True
    availability: str | None = Field(default=None, pattern=_REF_PATTERN)


class PlatformSpec(Spec):
    """A hardware platform; ``implementation`` is a
    :class:`omni_core.contract.platforms.Platform`."""

    kind: ClassVar[str] = "platforms"

    detector: str = Field(
        pattern=_REF_PATTERN,
        description='Lazy "module:func" returning an Availability. Must be cheap and '
        "side-effect free.",
    )
    priority: int = Field(0, description="Among available platforms the highest wins.")
    device_type: str = Field(description="torch device type, e.g. 'cuda' (also under ROCm).")
    compatibility: dict[str, str] = Field(
        default_factory=dict,
        description="Tested versions, e.g. {'omni-core': '>=0.3,<0.4', 'torch': '>=2.4'}.",
    )

    @field_validator("compatibility")
    @classmethod
    def _freeze(cls, value: dict[str, str]) -> dict[str, str]:
        return dict(sorted(value.items()))


class DenoiserSpec(Spec):
    """What acceleration and parallelism must know about one denoiser class.

    ``architectures`` are the class names it describes (``type(module).__name__``, e.g. diffusers'
    ``WanTransformer3DModel``); ``implementation`` points at a
    :class:`omni_core.diffusion.denoisers.DenoiserAdapter` or at a function
    ``(module) -> DenoiserAdapter`` (to pick calibration data from the module's config). The model
    plugin that owns the class registers it; a class nobody registers gets a generic adapter derived
    from its block lists.
    """

    kind: ClassVar[str] = "denoisers"

    architectures: tuple[str, ...] = Field(
        min_length=1, description="Class names of the denoiser modules this describes."
    )


class BenchmarkSpec(Spec):
    """A benchmark workload: a real-layout checkpoint, a request and the reference to beat.

    ``implementation`` points at a :class:`omni_core.bench.Workload` instance. ``pipeline``
    names the pipeline spec it exercises (its plugin registers both). ``omni bench pipeline``
    runs every registered workload through ``Omni(...)`` and the workload's reference in one
    process, on the same checkpoint folder.
    """

    kind: ClassVar[str] = "benchmarks"

    pipeline: str = Field(pattern=_NAME_PATTERN, description="The pipeline spec it measures.")
    tiny: bool = Field(False, description="A CPU smoke-test size (runs under `--tiny`).")


SPEC_TYPES: dict[str, type[Spec]] = {
    spec.kind: spec
    for spec in (
        PipelineSpec,
        AttentionBackendSpec,
        CacheBackendSpec,
        QuantizerSpec,
        PlatformSpec,
        DenoiserSpec,
        BenchmarkSpec,
    )
}


@dataclass
class Registry:
    """Every spec registered by the loaded plugins, by kind and name."""

    specs: dict[str, dict[str, Spec]] = field(
        default_factory=lambda: {kind: {} for kind in SPEC_TYPES}
    )

    def add(self, spec: Spec, plugin: str) -> Spec:
        """Add ``spec`` on behalf of ``plugin``; refuses silent duplicates."""
        expected = SPEC_TYPES.get(spec.kind)
        if expected is None or not isinstance(spec, expected):
            raise RegistrationError(f"plugin {plugin!r} registered {spec!r}, not a known spec")
        table = self.specs[spec.kind]
        existing = table.get(spec.name)
        if existing is not None and existing.plugin != plugin and not spec.overrides:
            raise RegistrationError(
                f"{_singular(spec.kind)} {spec.name!r} is registered by both plugin "
                f"{existing.plugin!r} and plugin {plugin!r}; set overrides=True in {plugin!r} "
                "to replace it deliberately"
            )
        if existing is not None and existing.plugin == plugin:
            raise RegistrationError(
                f"plugin {plugin!r} registered {_singular(spec.kind)} {spec.name!r} twice"
            )
        stamped = spec.model_copy(update={"plugin": plugin})
        table[spec.name] = stamped
        return stamped

    def kind(self, kind: str) -> dict[str, Any]:
        return self.specs[kind]

    @property
    def pipelines(self) -> dict[str, PipelineSpec]:
        return self.specs["pipelines"]  # type: ignore[return-value]

    @property
    def attention_backends(self) -> dict[str, AttentionBackendSpec]:
        return self.specs["attention_backends"]  # type: ignore[return-value]

    @property
    def cache_backends(self) -> dict[str, CacheBackendSpec]:
        return self.specs["cache_backends"]  # type: ignore[return-value]

    @property
    def quantizers(self) -> dict[str, QuantizerSpec]:
        return self.specs["quantizers"]  # type: ignore[return-value]

    @property
    def platforms(self) -> dict[str, PlatformSpec]:
        return self.specs["platforms"]  # type: ignore[return-value]

    @property
    def denoisers(self) -> dict[str, DenoiserSpec]:
        return self.specs["denoisers"]  # type: ignore[return-value]

    @property
    def benchmarks(self) -> dict[str, BenchmarkSpec]:
        return self.specs["benchmarks"]  # type: ignore[return-value]

    def denoiser_for(self, class_name: str) -> DenoiserSpec | None:
        """The denoiser spec that describes the class ``class_name`` (None: nobody does)."""
        for spec in self.denoisers.values():
            if class_name in spec.architectures:
                return spec
        return None

    def __iter__(self) -> Iterator[Spec]:
        for table in self.specs.values():
            yield from table.values()

    def by_plugin(self, plugin: str) -> dict[str, list[str]]:
        """Names each kind holds from ``plugin`` (for `omni list-plugins`)."""
        return {
            kind: sorted(name for name, spec in table.items() if spec.plugin == plugin)
            for kind, table in self.specs.items()
        }


def _singular(kind: str) -> str:
    return kind.rstrip("s").replace("_", " ")
