"""Shared fixtures of the core acceleration tests.

``registry``: the built-in plugins plus the denoiser knowledge of the two shipped model plugins,
registered the way any model plugin registers it: a plugin object whose
``omni_register_denoisers`` hook adds ``DenoiserSpec``s (no side registry, no class attribute).
Entry points are never read, so installed plugins do not leak in.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from omni_core import DenoiserSpec, hookimpl
from omni_core.contract.host import PluginHost
from omni_core.contract.registry import Registry


class ShippedDenoisers:
    """The DenoiserSpecs omni-wan and omni-qwen register, as one test plugin."""

    @hookimpl
    def omni_register_denoisers(self, register: Callable[[DenoiserSpec], None]) -> None:
        register(
            DenoiserSpec(
                name="wan-transformer-3d",
                architectures=("WanTransformer3DModel",),
                implementation="omni_wan.denoiser:wan_adapter",
            )
        )
        register(
            DenoiserSpec(
                name="qwen-image-transformer",
                architectures=("QwenImageTransformer2DModel",),
                implementation="omni_qwen.denoiser:qwen_image_adapter",
            )
        )


def _registry_with(*plugins: object) -> Registry:
    host = PluginHost(autoload=False)
    for index, plugin in enumerate(plugins):
        host.register_object(f"test-plugin-{index}", plugin)
    return host.registry


@pytest.fixture(scope="session")
def registry_with() -> Callable[..., Registry]:
    """``registry_with(*plugins)``: the built-ins plus ``plugins`` (objects with hooks)."""
    return _registry_with


@pytest.fixture(scope="session")
def registry() -> Registry:
    pytest.importorskip("omni_wan.denoiser")
    pytest.importorskip("omni_qwen.denoiser")
    return _registry_with(ShippedDenoisers())
