"""TeaCache (timestep-embedding-aware cache): our implementation on diffusers' hook API.

Before block 0 runs, the relative L1 change of the adapter's indicator (the timestep modulation)
since the last computed step is mapped through the adapter's polynomial and accumulated; while
the sum stays below ``threshold`` every block is skipped and the whole stack's last residuals
are reused (one per stream of the blocks, see :mod:`.streams`). The indicator and the
polynomial are model knowledge: the denoiser's model plugin registers them in its
:class:`~omni_core.diffusion.denoisers.DenoiserAdapter` (``teacache_indicator``,
``teacache_coefficients``, ``teacache_source``).

Options: ``threshold`` (0.2), ``warmup_steps`` (1, always computed), ``coefficients``
(comma-separated, overrides the adapter's).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omni_core.diffusion.acceleration.cache.base import (
    CacheBackend,
    CacheHandle,
    check_options,
    diffusers_hooks,
    finish_apply,
    floats,
    option,
)
from omni_core.diffusion.acceleration.cache.streams import (
    StreamLayout,
    add,
    stream_layout,
    subtract,
)
from omni_core.diffusion.denoisers import cache_block_list

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.config import CacheConfig
    from omni_core.diffusion.denoisers import DenoiserAdapter

OPTIONS = frozenset({"threshold", "warmup_steps", "coefficients"})
_TEA_HEAD = "omni_teacache_head"
_TEA_BLOCK = "omni_teacache_block"


@dataclass(frozen=True)
class TeaCacheConfig:
    """TeaCache's settings. ``coefficients`` None: the adapter's calibrated polynomial."""

    threshold: float = 0.2
    warmup_steps: int = 1
    coefficients: tuple[float, ...] | None = None


def teacache_config(config: CacheConfig) -> TeaCacheConfig:
    """``cache.options`` checked and typed."""
    check_options(config, OPTIONS, TeaCache.name)
    coefficients = floats(config.options.get("coefficients"), "coefficients")
    return TeaCacheConfig(
        threshold=option(config, "threshold", 0.2, float),
        warmup_steps=option(config, "warmup_steps", 1, int),
        coefficients=coefficients or None,
    )


def apply_teacache(module: Any, cfg: TeaCacheConfig, adapter: DenoiserAdapter) -> CacheHandle:
    """Install the head hook on block 0 and pass-through hooks on the other blocks."""
    coefficients = cfg.coefficients or adapter.teacache_coefficients
    blocks = [b for _, b in cache_block_list(module, adapter)]
    hooks = diffusers_hooks()
    head_cls, block_cls = _tea_hooks()
    manager = hooks.StateManager(_TeaState, (), {})
    head = head_cls(manager, adapter, tuple(coefficients), cfg.threshold, cfg.warmup_steps)
    hooks.HookRegistry.check_if_exists_or_initialize(blocks[0]).register_hook(head, _TEA_HEAD)
    for i, block in enumerate(blocks[1:], start=1):
        hook = block_cls(manager, adapter, is_tail=i == len(blocks) - 1)
        hooks.HookRegistry.check_if_exists_or_initialize(block).register_hook(hook, _TEA_BLOCK)
    if len(blocks) == 1:
        head.is_tail = True
    handle = CacheHandle(
        backend=TeaCache.name,
        module=module,
        adapter=adapter,
        probe=lambda: not manager.get_state().should_compute,
        options={
            "threshold": cfg.threshold,
            "warmup_steps": cfg.warmup_steps,
            "coefficients": list(coefficients),
            "coefficients_source": "user" if cfg.coefficients else adapter.teacache_source,
        },
    )
    return finish_apply(handle, (_TEA_HEAD, _TEA_BLOCK))


class TeaCache(CacheBackend):
    """TeaCache on diffusers' hook API (how it decides: the module docstring)."""

    name = "teacache"
    options = OPTIONS

    def apply(self, module: Any, config: CacheConfig, adapter: DenoiserAdapter) -> CacheHandle:
        return apply_teacache(module, teacache_config(config), adapter)


class _TeaState:
    """Per-context TeaCache state: last indicator, accumulated distance, residuals of the stack
    (one per stream of the blocks' :class:`StreamLayout`)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.step = 0
        self.previous_indicator: Any = None
        self.accumulated = 0.0
        self.should_compute = True
        self.head_inputs: list[Any] = []
        self.residuals: list[Any] | None = None


@functools.cache
def _tea_hooks() -> tuple[type, type]:
    """The two ModelHook subclasses, built on first use (importing this module needs no
    diffusers)."""
    hooks = diffusers_hooks()

    class TeaHeadHook(hooks.ModelHook):
        _is_stateful = True

        def __init__(
            self,
            state_manager: Any,
            adapter: DenoiserAdapter,
            coefficients: tuple[float, ...],
            threshold: float,
            warmup: int,
        ) -> None:
            super().__init__()
            self.state_manager = state_manager
            self.adapter = adapter
            self.coefficients = coefficients
            self.threshold = threshold
            self.warmup = warmup
            self.is_tail = False
            self.layout: StreamLayout | None = None

        def initialize_hook(self, module: Any) -> Any:
            self.layout = stream_layout(module, self.adapter)
            return module

        def _indicator(self, module: Any, args: tuple, kwargs: dict) -> Any:
            ind = self.adapter.teacache_indicator
            if callable(ind):
                return ind(module, args, kwargs)
            assert self.layout is not None
            return self.layout.argument(ind, args, kwargs)

        def _decide(self, state: _TeaState, indicator: Any) -> bool:
            # One scalar read per denoiser call: the skip decision has to be made on the host.
            if (
                state.previous_indicator is None
                or state.step < self.warmup
                or state.residuals is None
            ):
                return True
            prev = state.previous_indicator
            rel = (
                (indicator.float() - prev.float()).abs().mean()
                / prev.float().abs().mean().clamp_min(1e-12)
            ).item()
            change = 0.0
            for c in self.coefficients:
                change = change * rel + c
            state.accumulated += abs(change)
            if state.accumulated < self.threshold:
                return False
            return True

        def new_forward(self, module: Any, *args: Any, **kwargs: Any) -> Any:
            layout = self.layout
            assert layout is not None
            state: _TeaState = self.state_manager.get_state()
            indicator = self._indicator(module, args, kwargs).detach()
            compute = self._decide(state, indicator)
            state.should_compute = compute
            state.previous_indicator = indicator
            state.step += 1
            inputs = layout.inputs(args, kwargs)
            if not compute:
                assert state.residuals is not None
                return layout.join(add(inputs, state.residuals))
            state.accumulated = 0.0
            state.head_inputs = inputs
            output = self.fn_ref.original_forward(*args, **kwargs)
            if self.is_tail:
                state.residuals = subtract(layout.outputs(output), inputs)
            return output

        def reset_state(self, module: Any) -> Any:
            self.state_manager.reset()
            return module

    class TeaBlockHook(hooks.ModelHook):
        def __init__(
            self, state_manager: Any, adapter: DenoiserAdapter, is_tail: bool = False
        ) -> None:
            super().__init__()
            self.state_manager = state_manager
            self.adapter = adapter
            self.is_tail = is_tail
            self.layout: StreamLayout | None = None

        def initialize_hook(self, module: Any) -> Any:
            self.layout = stream_layout(module, self.adapter)
            return module

        def new_forward(self, module: Any, *args: Any, **kwargs: Any) -> Any:
            layout = self.layout
            assert layout is not None
            state: _TeaState = self.state_manager.get_state()
            if not state.should_compute:
                # The head already returned the cached result: pass the inputs through.
                return layout.join(layout.inputs(args, kwargs))
            output = self.fn_ref.original_forward(*args, **kwargs)
            if self.is_tail:
                state.residuals = subtract(layout.outputs(output), state.head_inputs)
            return output

    return TeaHeadHook, TeaBlockHook
