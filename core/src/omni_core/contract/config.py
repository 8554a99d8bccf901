"""The settings a pipeline is loaded with (pydantic): attention, cache, quantization,
parallelism, LoRA and memory.

Every model forbids unknown fields, so a typo is an error that names the field instead of a
silently ignored setting. Reading them from a TOML file, ``OMNI_*`` environment variables and
``--set`` flags is the CLI's job (:mod:`omni_core.commands.config_files`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from omni_core.contract.errors import ConfigError


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AttentionConfig(Section):
    """Which attention backend runs, globally and per role."""

    backend: str = Field("auto", description="Backend for every role unless overridden.")
    self_attention: str | None = Field(None, alias="self", description="Self-attention backend.")
    cross_attention: str | None = Field(None, alias="cross", description="Cross-attention backend.")
    joint_attention: str | None = Field(None, alias="joint", description="Joint-attention backend.")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def override(self, role: str) -> str | None:
        """The backend set for ``role`` itself (None: it follows ``backend``)."""
        return {
            "self": self.self_attention,
            "cross": self.cross_attention,
            "joint": self.joint_attention,
        }[role]

    def for_role(self, role: str) -> str:
        return self.override(role) or self.backend

    def with_roles(self, backends: Mapping[str, str]) -> AttentionConfig:
        """A copy with ``{role: backend}`` set as per-role overrides."""
        names = {"self": "self_attention", "cross": "cross_attention", "joint": "joint_attention"}
        return self.model_copy(update={names[role]: name for role, name in backends.items()})


class CacheConfig(Section):
    """Step cache: which backend (None for none) and its options."""

    backend: str | None = None
    options: dict[str, float | int | str | bool] = Field(default_factory=dict)


class QuantizationConfig(Section):
    """Quantizer applied to the denoiser's linear layers (None for none)."""

    method: str | None = None
    components: tuple[str, ...] = ("transformer",)


class ParallelConfig(Section):
    """Multi-device layout."""

    cfg_parallel_size: int = Field(1, ge=1, le=2)
    ulysses_degree: int = Field(1, ge=1)


class LoraAdapterConfig(Section):
    """One LoRA adapter to preload: a local safetensors file or folder, or a Hub id."""

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$")
    path: str = Field(min_length=1)
    #: The scale a request gets when it names the adapter without one.
    scale: float = Field(1.0, ge=-10.0, le=10.0)


class LoraConfig(Section):
    """LoRA adapters of the denoiser(s): preloaded ones, one fused at load, the active LRU."""

    adapters: tuple[LoraAdapterConfig, ...] = ()
    #: The adapter merged into the weights at load (a step distill); not selectable per request.
    fuse: str | None = None
    #: Adapters kept loaded in the denoiser at once (least recently used ones are unloaded
    #: and reloaded from host memory when asked for again).
    max_active: int = Field(8, ge=1)
    #: Device memory the loaded adapters may take, in MiB (None: no cap beyond max_active).
    max_memory_mb: float | None = Field(None, gt=0)
    #: Request defaults of the fused distill (override its metadata); None: the metadata's.
    steps: int | None = Field(None, ge=1, le=1000)
    guidance_scale: float | None = Field(None, ge=0.0, le=100.0)


class MemoryConfig(Section):
    """Device memory: component offload and VAE tiling/slicing."""

    #: none | model (a whole component on the device while it runs) | block (the denoisers'
    #: blocks streamed in with prefetch on a side stream) | auto (default: picked from
    #: max_gpu_memory; none without it).
    offload: Literal["none", "model", "block", "auto"] = "auto"
    #: GiB of device memory the model may use; with offload "auto" it picks the mode.
    max_gpu_memory: float | None = Field(None, gt=0)
    #: Blocks per group of block offload.
    blocks_per_group: int = Field(1, ge=1)
    #: auto (tile when the decode would not fit the device's free memory), on, off.
    vae_tiling: Literal["auto", "on", "off"] = "auto"
    #: Decode / encode a batch one sample at a time (auto: when tiling is on).
    vae_slicing: Literal["auto", "on", "off"] = "auto"
    #: Tile size in pixels when tiling (None: the VAE's own default); tiles overlap by 1/4.
    vae_tile: int | None = Field(None, ge=16, le=8192)


def parse_lora_spec(text: str) -> dict[str, Any]:
    """``NAME=PATH[:SCALE]`` (``omni serve --lora``) -> ``{"name", "path"[, "scale"]}``."""
    name, sep, rest = text.partition("=")
    if not sep or not name.strip() or not rest.strip():
        raise ConfigError(f"lora: expected NAME=PATH[:SCALE], got {text!r}")
    path, colon, tail = rest.rpartition(":")
    out: dict[str, Any] = {"name": name.strip(), "path": rest.strip()}
    if colon and path:
        try:
            out.update(path=path.strip(), scale=float(tail))
        except ValueError:
            pass  # a colon inside the path or Hub id, no scale
    return out


def as_lora_config(value: Any, fuse: str | None = None) -> LoraConfig:
    """``Omni(lora=...)``: a LoraConfig, its dict, ``{name: path | {path, scale}}``, or a list
    of ``{name, path, scale}`` / ``"NAME=PATH[:SCALE]"``; ``fuse`` names the one to merge."""
    if isinstance(value, LoraConfig):
        config = value
    else:
        data: Any = value or {}
        if isinstance(data, str):
            data = [data]
        if isinstance(data, Mapping) and "adapters" not in data:
            data = [
                {"name": k, **(dict(v) if isinstance(v, Mapping) else {"path": str(v)})}
                for k, v in data.items()
            ]
        if isinstance(data, list | tuple):
            items = [parse_lora_spec(v) if isinstance(v, str) else v for v in data]
            data = {"adapters": items}
        config = validate_config(data, {}, LoraConfig)
    if fuse is not None:
        config = config.model_copy(update={"fuse": fuse})
    return config


def as_memory_config(
    offload: Any = None, max_gpu_memory: float | None = None, vae_tiling: Any = None
) -> MemoryConfig:
    """``Omni(offload=..., max_gpu_memory=..., vae_tiling=...)`` -> a MemoryConfig
    (``offload`` may be a mode name, a MemoryConfig or its dict; ``vae_tiling`` a bool too)."""
    if isinstance(offload, MemoryConfig):
        data: dict[str, Any] = offload.model_dump()
    elif isinstance(offload, Mapping):
        data = dict(offload)
    else:
        data = {"offload": offload} if offload is not None else {}
    if max_gpu_memory is not None:
        data["max_gpu_memory"] = max_gpu_memory
    if vae_tiling is not None:
        data["vae_tiling"] = {True: "on", False: "off"}.get(vae_tiling, vae_tiling)
    return validate_config(data, {}, MemoryConfig)


_M = TypeVar("_M", bound=BaseModel)


def as_section(value: Any, model: type[_M], field: str) -> _M:
    """``Omni(attention=..., cache=..., quantization=...)``: None (the defaults), the model, its
    dict, or a name (``"sdpa"`` is ``{"backend": "sdpa"}``, ``"fp8"`` ``{"method": "fp8"}``)."""
    if value is None:
        return model()
    if isinstance(value, model):
        return value
    if isinstance(value, str):
        key = {"AttentionConfig": "backend", "CacheConfig": "backend"}.get(model.__name__, "method")
        value = {key: value}
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise ConfigError(f"{field}: {exc}") from None


def validate_config(
    data: Mapping[str, Any], sources: Mapping[str, str] | None, model: type[_M]
) -> _M:
    """Validate ``data`` into ``model``; a ValidationError becomes a ConfigError naming fields."""
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, sources or {})) from None


def describe_validation_error(exc: ValidationError, sources: Mapping[str, str]) -> str:
    """One line per problem: ``section.field: message (from SOURCE)``."""
    lines = []
    for error in exc.errors():
        loc = ".".join(str(part) for part in error["loc"]) or "config"
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown setting"
        source = sources.get(loc)
        lines.append(f"{loc}: {message}" + (f" (from {source})" if source else ""))
    return "; ".join(lines)
