"""Settings from a TOML file, ``OMNI_*`` environment variables and ``--set`` flags.

:func:`load_config` merges them into one :class:`OmniConfig` (one section per concern, each a
model of :mod:`omni_core.contract.config`), later sources winning: the file, then the
environment, then explicit options (CLI flags). Every error names the field and where its value
came from.
"""

from __future__ import annotations

import json
import os
import tomllib
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from omni_core.contract.config import (
    AttentionConfig,
    CacheConfig,
    ParallelConfig,
    QuantizationConfig,
    Section,
    validate_config,
)
from omni_core.contract.errors import ConfigError

#: Environment variable naming a TOML config file (``--config FILE`` wins over it).
CONFIG_ENV = "OMNI_CONFIG"
ENV_PREFIX = "OMNI_"


class EngineConfig(Section):
    """Engine limits: batching and back-pressure."""

    max_batch: int = Field(4, ge=1, description="Most requests stepped together.")
    max_queue: int = Field(64, ge=1, description="Queued requests before new ones get 429.")
    request_timeout_s: float | None = Field(None, gt=0)


class OmniConfig(Section):
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


SECTIONS: dict[str, type[Section]] = {
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
    return validate_config(data, sources, OmniConfig)


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
