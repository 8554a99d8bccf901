"""Configuration models (pydantic): engine, attention, cache, quantization and parallelism.

Every model forbids unknown fields, so a typo is an error that names the field instead of a
silently ignored setting. :func:`load_config` merges a config file, ``OMNI_*`` environment
variables and explicit options (CLI flags), later sources winning.
"""

from __future__ import annotations

import json
import os
import tomllib
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from omni_core.contract.errors import ConfigError

#: Environment variable naming a TOML config file (``--config FILE`` wins over it).
CONFIG_ENV = "OMNI_CONFIG"
ENV_PREFIX = "OMNI_"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AttentionConfig(_Section):
    """Which attention backend runs, globally and per role."""

    backend: str = Field("auto", description="Backend for every role unless overridden.")
    self_attention: str | None = Field(None, alias="self", description="Self-attention backend.")
    cross_attention: str | None = Field(None, alias="cross", description="Cross-attention backend.")
    joint_attention: str | None = Field(None, alias="joint", description="Joint-attention backend.")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def for_role(self, role: str) -> str:
        override = {
            "self": self.self_attention,
            "cross": self.cross_attention,
            "joint": self.joint_attention,
        }[role]
        return override or self.backend


class CacheConfig(_Section):
    """Step cache: which backend (None for none) and its options."""

    backend: str | None = None
    options: dict[str, float | int | str | bool] = Field(default_factory=dict)


class QuantizationConfig(_Section):
    """Quantizer applied to the denoiser's linear layers (None for none)."""

    method: str | None = None
    components: tuple[str, ...] = ("transformer",)


class ParallelConfig(_Section):
    """Multi-device layout."""

    cfg_parallel_size: int = Field(1, ge=1, le=2)
    ulysses_degree: int = Field(1, ge=1)


class LoraAdapterConfig(_Section):
    """One LoRA adapter to preload: a local safetensors file or folder, or a Hub id."""

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$")
    path: str = Field(min_length=1)
    #: The scale a request gets when it names the adapter without one.
    scale: float = Field(1.0, ge=-10.0, le=10.0)


class LoraConfig(_Section):
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


class MemoryConfig(_Section):
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


class EngineConfig(_Section):
    """Engine limits: batching and back-pressure."""

    max_batch: int = Field(4, ge=1, description="Most requests stepped together.")
    max_queue: int = Field(64, ge=1, description="Queued requests before new ones get 429.")
    request_timeout_s: float | None = Field(None, gt=0)


class OmniConfig(_Section):
    """Every setting of an omni process, one section per concern.

    As a TOML file::

        [attention]
        backend = "sdpa"
        cross = "sdpa-math"

        [engine]
        max_batch = 8
    """

    engine: EngineConfig = Field(default_factory=EngineConfig)
    attention: AttentionConfig = Field(default_factory=AttentionConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    quantization: QuantizationConfig = Field(default_factory=QuantizationConfig)
    parallel: ParallelConfig = Field(default_factory=ParallelConfig)


SECTIONS: dict[str, type[_Section]] = {
    name: typing.get_type_hints(OmniConfig)[name] for name in OmniConfig.model_fields
}


def env_names() -> dict[str, tuple[str, str]]:
    """``OMNI_<SECTION>_<FIELD>`` -> (section, key); aliases too (``OMNI_ATTENTION_SELF``)."""
    names: dict[str, tuple[str, str]] = {}
    for section, model in SECTIONS.items():
        for field_name, info in model.model_fields.items():
            for key in {field_name, info.alias or field_name}:
                names[f"{ENV_PREFIX}{section}_{key}".upper()] = (section, key)
    return names


def _env_value(section: str, key: str, raw: str) -> Any:
    """Environment values are strings: JSON for dicts/lists, commas for tuples."""
    model = SECTIONS[section]
    field_name = next((n for n, f in model.model_fields.items() if key in (n, f.alias)), key)
    annotation = str(model.model_fields[field_name].annotation)
    text = raw.strip()
    if text.startswith(("{", "[")):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{section}.{key}: invalid JSON in environment: {exc}") from None
    if annotation.startswith("tuple"):
        return tuple(part.strip() for part in text.split(",") if part.strip())
    if text.lower() in {"", "none", "null"} and "None" in annotation:
        return None
    return text


def _set_dotted(target: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = target
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{dotted}: {part!r} is a value, not a section")
        node = child
    node[parts[-1]] = value


def _merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = dict(value) if isinstance(value, Mapping) else value
    return out


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and (not prefix or key != "options"):
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a TOML config file; a missing file or bad TOML is a ConfigError naming it."""
    file = Path(path)
    try:
        with file.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {str(file)!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {str(file)!r} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"config file {str(file)!r} cannot be read: {exc}") from None


def load_config(
    file: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> OmniConfig:
    """Merge defaults < config file < ``OMNI_*`` environment < ``overrides`` (CLI flags).

    ``file`` defaults to ``$OMNI_CONFIG``. ``overrides`` may be nested
    (``{"attention": {"backend": "sdpa"}}``) or dotted (``{"attention.backend": "sdpa"}``);
    ``None`` values are ignored (an unset CLI flag). Errors name the field and its source, e.g.
    ``attention.backend: ... (from OMNI_ATTENTION_BACKEND)``.
    """
    env = os.environ if env is None else env
    sources: dict[str, str] = {}
    data: dict[str, Any] = {}
    path = file if file is not None else (env.get(CONFIG_ENV) or None)
    if path is not None:
        from_file = read_config_file(path)
        data = _merge(data, from_file)
        sources.update(dict.fromkeys(_flatten(from_file), f"config file {str(path)!r}"))
    known = env_names()
    for name in sorted(env):
        if name in known:
            section, key = known[name]
            _set_dotted(data, f"{section}.{key}", _env_value(section, key, env[name]))
            sources[f"{section}.{key}"] = name
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if isinstance(value, Mapping) and "." not in key:
            data = _merge(data, {key: value})
            sources.update(dict.fromkeys(_flatten({key: value}), "command line"))
        else:
            _set_dotted(data, key, value)
            sources[key] = "command line"
    return validate_config(data, sources)


_M = TypeVar("_M", bound=BaseModel)


def validate_config(
    data: Mapping[str, Any], sources: Mapping[str, str] | None = None, model: type[_M] = OmniConfig
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


def parse_assignments(assignments: typing.Iterable[str]) -> dict[str, Any]:
    """``["attention.backend=sdpa", "engine.max_batch=8"]`` -> dotted overrides (CLI ``--set``)."""
    out: dict[str, Any] = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected SECTION.FIELD=VALUE")
        key = key.strip()
        if "." not in key or key.split(".", 1)[0] not in SECTIONS:
            raise ConfigError(
                f"--set {item!r}: the key must start with a section ({', '.join(SECTIONS)})"
            )
        section, field = key.split(".", 1)
        out[key] = _env_value(section, field, value) if field.count(".") == 0 else value
    return out


def config_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Click decorator adding ``--config FILE`` and repeatable ``--set SECTION.FIELD=VALUE``.

    The command receives ``config_file`` and ``config_set``; pass them to
    :func:`config_from_cli` to get the merged :class:`OmniConfig`.
    """
    import click

    func = click.option(
        "--set",
        "config_set",
        multiple=True,
        metavar="SECTION.FIELD=VALUE",
        help="Override one setting, e.g. --set attention.backend=sdpa (repeatable).",
    )(func)
    return click.option(
        "--config",
        "config_file",
        type=click.Path(dir_okay=False),
        default=None,
        help=f"TOML config file (default: ${CONFIG_ENV}).",
    )(func)


def config_from_cli(
    config_file: str | None,
    config_set: typing.Iterable[str] = (),
    flags: Mapping[str, Any] | None = None,
) -> OmniConfig:
    """Merge file/env with ``--set`` values and dedicated flags (``{"attention.backend": ...}``)."""
    overrides = parse_assignments(config_set)
    overrides.update({k: v for k, v in (flags or {}).items() if v is not None})
    return load_config(config_file, overrides=overrides)
