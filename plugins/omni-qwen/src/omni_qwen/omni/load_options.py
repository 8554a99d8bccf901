"""Load-option values of the Omni pipelines, read one way: on/off switches and bounded
integers, each a ConfigError naming the key when it is neither."""

from __future__ import annotations

from typing import Any

from omni_core import ConfigError


def flag(name: str, value: Any) -> bool:
    """``on``/``true``/``1``/``yes`` or ``off``/``false``/``0``/``no`` (any case)."""
    text = str(value).strip().lower()
    if text in ("on", "true", "1", "yes"):
        return True
    if text in ("off", "false", "0", "no"):
        return False
    raise ConfigError(f"{name}={value!r}: expected on or off (true or false)")


def integer(extra: dict[str, Any], name: str, default: int, least: int) -> int:
    """``extra[name]`` (or ``default``) as an int of at least ``least``."""
    try:
        value = int(extra.get(name, default))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}={extra.get(name)!r}: expected an integer") from exc
    if value < least:
        raise ConfigError(f"{name}={value}: at least {least}")
    return value
