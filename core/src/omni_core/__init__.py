"""omni-core: the plugin SDK and runtime of omni.

Importing this package is cheap on purpose (no torch): heavy names such as :class:`Omni` are
resolved lazily on first attribute access, so `omni --help` and `omni list-plugins` stay fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from omni_core.hookspecs import hookimpl

__version__ = "0.1.0"

#: The plugin API version. A plugin declares the version it was built for as a module attribute
#: ``OMNI_PLUGIN_API = "1.0"``; plugins of another major version are reported and not loaded.
PLUGIN_API_VERSION = "1.0"

_LAZY = {
    "Omni": "omni_core.api:Omni",
    "GenerationResult": "omni_core.pipelines.base:GenerationResult",
    "GenerationRequest": "omni_core.pipelines.base:GenerationRequest",
}

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.api import Omni
    from omni_core.pipelines.base import GenerationRequest, GenerationResult


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'omni_core' has no attribute {name!r}")
    module, attr = target.split(":")
    value = getattr(import_module(module), attr)
    globals()[name] = value
    return value


__all__ = [
    "PLUGIN_API_VERSION",
    "GenerationRequest",
    "GenerationResult",
    "Omni",
    "__version__",
    "hookimpl",
]
