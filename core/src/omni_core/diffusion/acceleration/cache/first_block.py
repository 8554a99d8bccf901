"""First Block Cache (diffusers' ``FirstBlockCacheConfig``): skip blocks 1..N while block 0's
residual barely changes between steps. Option: ``threshold`` (relative L1, default 0.05).

Blocks whose layout diffusers knows get diffusers' own hooks. Blocks whose adapter declares
``block_streams`` (several streams diffusers' hooks cannot carry, e.g. LTX-2's video and audio)
get the same algorithm on omni's :class:`~.streams.StreamLayout`: block 0's residual of the
first stream decides, and every stream replays its own residual of blocks 1..N.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import ConfigError
from omni_core.diffusion.acceleration.cache.base import (
    CacheBackend,
    CacheHandle,
    check_options,
    diffusers_hooks,
    finish_apply,
    head_state,
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

OPTIONS = frozenset({"threshold"})
_STREAM_HEAD = "omni_fbc_streams_head"
_STREAM_BLOCK = "omni_fbc_streams_block"


def first_block_config(config: CacheConfig) -> Any:
    """``cache.options`` checked and turned into diffusers' ``FirstBlockCacheConfig``."""
    from diffusers.hooks import FirstBlockCacheConfig

    check_options(config, OPTIONS, FirstBlockCache.name)
    return FirstBlockCacheConfig(threshold=option(config, "threshold", 0.05, float))


def apply_first_block_cache(module: Any, cfg: Any, adapter: DenoiserAdapter) -> CacheHandle:
    """First Block Cache wired over the adapter's blocks (any block-list name)."""
    blocks = [b for _, b in cache_block_list(module, adapter)]
    if len(blocks) < 2:
        raise ConfigError("first-block cache needs at least two transformer blocks")
    if adapter.block_streams:
        return _apply_streams(module, blocks, cfg, adapter)
    from diffusers.hooks.first_block_cache import (
        _FBC_BLOCK_HOOK,
        _FBC_LEADER_BLOCK_HOOK,
        FBCSharedBlockState,
        _apply_fbc_block_hook,
        _apply_fbc_head_block_hook,
    )
    from diffusers.hooks.hooks import StateManager

    # Same wiring as diffusers.hooks.apply_first_block_cache, but over the adapter's blocks
    # (so models whose block list has another name work too).
    manager = StateManager(FBCSharedBlockState, (), {})
    _apply_fbc_head_block_hook(blocks[0], manager, cfg.threshold)
    for block in blocks[1:-1]:
        _apply_fbc_block_hook(block, manager)
    _apply_fbc_block_hook(blocks[-1], manager, is_tail=True)
    state = head_state(blocks[0], _FBC_LEADER_BLOCK_HOOK)
    handle = CacheHandle(
        backend=FirstBlockCache.name,
        module=module,
        adapter=adapter,
        probe=lambda: not state().should_compute,
        options={"threshold": cfg.threshold},
    )
    return finish_apply(handle, (_FBC_LEADER_BLOCK_HOOK, _FBC_BLOCK_HOOK))


def _apply_streams(
    module: Any, blocks: list[Any], cfg: Any, adapter: DenoiserAdapter
) -> CacheHandle:
    """The stream-aware hooks: head on block 0, pass-through or residual-taking on the rest."""
    hooks = diffusers_hooks()
    head_cls, block_cls = _stream_hooks()
    manager = hooks.StateManager(_StreamState, (), {})
    head = head_cls(manager, stream_layout(blocks[0], adapter), cfg.threshold)
    hooks.HookRegistry.check_if_exists_or_initialize(blocks[0]).register_hook(head, _STREAM_HEAD)
    for i, block in enumerate(blocks[1:], start=1):
        hook = block_cls(manager, stream_layout(block, adapter), is_tail=i == len(blocks) - 1)
        hooks.HookRegistry.check_if_exists_or_initialize(block).register_hook(hook, _STREAM_BLOCK)
    handle = CacheHandle(
        backend=FirstBlockCache.name,
        module=module,
        adapter=adapter,
        probe=lambda: not manager.get_state().should_compute,
        options={"threshold": cfg.threshold, "streams": list(adapter.block_streams)},
    )
    return finish_apply(handle, (_STREAM_HEAD, _STREAM_BLOCK))


class FirstBlockCache(CacheBackend):
    """First Block Cache: skip the other blocks when block 0's residual barely moves.

    Options: ``threshold`` (relative L1 change of block 0's residual, default 0.05).
    """

    name = "first-block"
    options = OPTIONS

    def apply(self, module: Any, config: CacheConfig, adapter: DenoiserAdapter) -> CacheHandle:
        return apply_first_block_cache(module, first_block_config(config), adapter)


class _StreamState:
    """Per-context state: block 0's outputs and first-stream residual, the tail residuals."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.head_outputs: list[Any] = []
        self.head_residual: Any = None
        self.residuals: list[Any] | None = None
        self.should_compute = True


@functools.cache
def _stream_hooks() -> tuple[type, type]:
    """The two ModelHook subclasses, built on first use (importing this module needs no
    diffusers)."""
    hooks = diffusers_hooks()

    class StreamHeadHook(hooks.ModelHook):
        _is_stateful = True

        def __init__(self, state_manager: Any, layout: StreamLayout, threshold: float) -> None:
            super().__init__()
            self.state_manager = state_manager
            self.layout = layout
            self.threshold = threshold

        def new_forward(self, module: Any, *args: Any, **kwargs: Any) -> Any:
            state: _StreamState = self.state_manager.get_state()
            inputs = self.layout.inputs(args, kwargs)
            output = self.fn_ref.original_forward(*args, **kwargs)
            outputs = self.layout.outputs(output)
            residual = outputs[0] - inputs[0]
            state.should_compute = self._should_compute(state, residual)
            if not state.should_compute:
                assert state.residuals is not None
                return self.layout.join(add(outputs, state.residuals))
            state.head_outputs = outputs
            state.head_residual = residual
            return output

        def _should_compute(self, state: _StreamState, residual: Any) -> bool:
            # One scalar read per denoiser call: the skip decision has to be made on the host.
            previous = state.head_residual
            if previous is None or state.residuals is None:
                return True
            change = (residual - previous).abs().mean() / previous.abs().mean()
            return bool(change.item() > self.threshold)

        def reset_state(self, module: Any) -> Any:
            self.state_manager.reset()
            return module

    class StreamBlockHook(hooks.ModelHook):
        def __init__(self, state_manager: Any, layout: StreamLayout, is_tail: bool) -> None:
            super().__init__()
            self.state_manager = state_manager
            self.layout = layout
            self.is_tail = is_tail

        def new_forward(self, module: Any, *args: Any, **kwargs: Any) -> Any:
            state: _StreamState = self.state_manager.get_state()
            if not state.should_compute:  # the head returned the cached result: pass through
                return self.layout.join(self.layout.inputs(args, kwargs))
            output = self.fn_ref.original_forward(*args, **kwargs)
            if self.is_tail:
                state.residuals = subtract(self.layout.outputs(output), state.head_outputs)
            return output

    return StreamHeadHook, StreamBlockHook
