"""omni-core: the plugin SDK and runtime of omni. ``import omni_core`` is the whole public SDK.

The top level holds what every plugin needs: the hook marker, the specs a hook registers, the
pipeline contract's base types, the request/result types, :class:`Omni` and the errors. Each
lane has a face of its own, a subpackage listing its public names once:

- :mod:`omni_core.diffusion`: staged pipelines, denoisers, acceleration, parallelism, LoRA;
- :mod:`omni_core.speech`: speech pipelines, the autoregressive speech chain, voices;
- :mod:`omni_core.chat`: chat pipelines, text stages, the chat runtime;
- :mod:`omni_core.runtime`: what every lane shares (engine, slots, caches, graphs, platform);
- :mod:`omni_core.serving` (the server, for deployment plugins), :mod:`omni_core.bench`
  (benchmark workloads) and :mod:`omni_core.testing` (the plugin-author test kit).

Modules not reached through a face are internal and may change in any release. Importing this
package is cheap on purpose (no torch, no pydantic): every name except the hook marker and the
versions resolves on first access, so ``omni --help`` and ``omni list-plugins`` stay fast.
"""

from __future__ import annotations

import warnings
from importlib import import_module
from typing import Any

from omni_core.contract.faces import Face
from omni_core.contract.hookspecs import hookimpl as hookimpl
from omni_core.contract.version import PLUGIN_API_VERSION as PLUGIN_API_VERSION
from omni_core.contract.version import __version__ as __version__

#: The lane faces and the other public subpackages (``omni_core.speech`` etc.).
FACES: tuple[str, ...] = ("diffusion", "speech", "chat", "runtime", "serving", "bench", "testing")

_face = Face(
    __name__,
    {
        "omni_core.api": ("Omni",),
        "omni_core.contract.registry": (
            "Availability",
            "PipelineSpec",
            "PipelineCapabilities",
            "AttentionBackendSpec",
            "CacheBackendSpec",
            "QuantizerSpec",
            "PlatformSpec",
            "DenoiserSpec",
            "BenchmarkSpec",
        ),
        "omni_core.contract.pipeline": ("Pipeline", "PipelineOptions"),
        "omni_core.contract.types": (
            "GenerationRequest",
            "GenerationResult",
            "NoExtras",
            "LoraRef",
        ),
        "omni_core.contract.errors": (
            "OmniError",
            "ConfigError",
            "InvalidRequestError",
            "ModelNotFoundError",
            "PlatformError",
            "PluginError",
        ),
    },
)

#: Lane faces whose names the 2.0 API had at the top level (resolved with a warning).
_MOVED_FROM = ("diffusion", "speech", "chat", "runtime", "serving", "bench")


def __getattr__(name: str) -> Any:
    if name in _face.where:
        return _face.resolve(name)
    if name in FACES:
        return import_module(f"{__name__}.{name}")
    for face in _MOVED_FROM:
        module = import_module(f"{__name__}.{face}")
        if name in module.__all__:
            warnings.warn(
                f"omni_core.{name} moved to omni_core.{face}.{name} (plugin API 2.1)",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(module, name)
    raise AttributeError(f"module 'omni_core' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = sorted(["PLUGIN_API_VERSION", "__version__", "hookimpl", *_face.names, *FACES])
