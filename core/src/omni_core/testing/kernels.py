"""The core's two doors for kernel plugins, to test a backend the way pipelines reach it.

- attention: :func:`attention_router` builds the router a pipeline gets (which backend runs for
  each role on this registry and platform, ``router.names``); inside :func:`use_router`,
  :func:`dispatch_attention` (``q, k, v`` as ``[batch, seq, heads, head_dim]``, ``role``,
  ``attn_mask``, ``scale``) calls the routed kernel; :func:`backend_availability` (``spec,
  device_type``) says whether a backend can run and why not, as ``omni doctor`` does;
- quantization: :func:`quantize_components` quantizes named components with a registered
  quantizer, checking its device types and availability first (a :class:`~omni_core.ConfigError`
  naming ``quantization.method`` otherwise), as ``--quantization`` does.

Nothing here imports torch until a kernel runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omni_core.contract.attention import backend_availability, dispatch_attention, use_router
from omni_core.diffusion.acceleration.quantization import quantize_components

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.attention import AttentionRouter
    from omni_core.contract.platforms import Platform
    from omni_core.contract.registry import Registry

__all__ = [
    "attention_router",
    "backend_availability",
    "dispatch_attention",
    "quantize_components",
    "use_router",
]


def attention_router(registry: Registry, platform: Platform, **config: Any) -> AttentionRouter:
    """The router a pipeline loaded on ``platform`` with ``registry`` gets; ``config`` is the
    ``attention`` section (``backend="auto"``, ``self=``, ``cross=``, ``joint=``)."""
    from omni_core.contract.attention import AttentionRouter
    from omni_core.contract.config import AttentionConfig

    return AttentionRouter.build(AttentionConfig(**config), registry, platform)
