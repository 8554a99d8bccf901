"""TaylorSeer over declared streams: the blocks of an adapter with ``block_streams``, which
diffusers' TaylorSeer hooks cannot carry, on omni's own hooks and :class:`~.streams.StreamLayout`.

The schedule and the expansion are diffusers' (``TaylorSeerCacheConfig`` with the same
options): each cached block counts its calls per cache context; it computes in full for the
first ``warmup_steps`` calls and on every ``cache_interval``-th call after, and keeps, per
stream, the Taylor factors of its last full computes (the output, then divided differences up
to ``max_order``, stored in ``factors_dtype``). On the other calls each stream of the block's
output is predicted as ``sum_k F_k * d**k / k!`` with ``d`` the calls since the last compute.
One deviation: a call with nothing to extrapolate from (``warmup_steps=0``) computes, where
diffusers would fail. ``lite`` (predict diffusers' ``proj_out``, zero the blocks) names a
module no adapter field describes, so it is refused for declared streams.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import ConfigError
from omni_core.diffusion.acceleration.cache.base import (
    CacheHandle,
    diffusers_hooks,
    finish_apply,
    head_state,
)
from omni_core.diffusion.acceleration.cache.streams import StreamLayout, stream_layout
from omni_core.diffusion.denoisers import cache_block_list

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.diffusion.denoisers import DenoiserAdapter

_HOOK = "omni_taylorseer_streams"


@dataclass(frozen=True)
class TaylorSeerOptions:
    """TaylorSeer's typed options (the names of ``cache.options``)."""

    cache_interval: int = 5
    warmup_steps: int = 3
    max_order: int = 1
    factors_dtype: Any = None  # a torch.dtype; None: bfloat16
    lite: bool = False

    def check(self) -> None:
        """Refuse values the schedule cannot use (a zero interval would divide by zero)."""
        if self.cache_interval < 1:
            raise ConfigError(
                f"cache.options.cache_interval: must be >= 1, got {self.cache_interval}"
            )
        if self.warmup_steps < 0:
            raise ConfigError(f"cache.options.warmup_steps: must be >= 0, got {self.warmup_steps}")
        if self.max_order < 0:
            raise ConfigError(f"cache.options.max_order: must be >= 0, got {self.max_order}")


def apply_stream_taylorseer(
    module: Any, opts: TaylorSeerOptions, adapter: DenoiserAdapter
) -> CacheHandle:
    """One TaylorSeer hook (own per-context state) on every block the caches wrap."""
    if opts.lite:
        raise ConfigError(
            f"cache.options.lite: TaylorSeer's lite mode predicts a proj_out module and zeroes "
            f"the blocks, which does not map onto {adapter.architecture}'s blocks (streams "
            f"{', '.join(adapter.block_streams)}); leave lite off"
        )
    import torch

    hooks = diffusers_hooks()
    dtype = opts.factors_dtype or torch.bfloat16
    hook_cls = _taylor_hook()
    blocks = [b for _, b in cache_block_list(module, adapter)]
    for block in blocks:
        manager = hooks.StateManager(
            _TaylorState, (), {"max_order": opts.max_order, "dtype": dtype}
        )
        hook = hook_cls(
            manager, stream_layout(block, adapter), opts.cache_interval, opts.warmup_steps
        )
        hooks.HookRegistry.check_if_exists_or_initialize(block).register_hook(hook, _HOOK)
    state = head_state(blocks[0], _HOOK)

    def probe() -> bool:
        head: _TaylorState = state()
        return head.last_update != head.step

    handle = CacheHandle(
        backend="taylorseer",
        module=module,
        adapter=adapter,
        probe=probe,
        options={
            "cache_interval": opts.cache_interval,
            "warmup_steps": opts.warmup_steps,
            "max_order": opts.max_order,
            "streams": list(adapter.block_streams),
        },
    )
    return finish_apply(handle, (_HOOK,))


class _TaylorState:
    """One block's state in one context: its call counter and each stream's Taylor factors."""

    def __init__(self, max_order: int, dtype: Any) -> None:
        self.max_order = max_order
        self.dtype = dtype
        self.reset()

    def reset(self) -> None:
        self.step = -1
        self.last_update: int | None = None
        #: Per stream: [F_0, F_1, ...] in ``dtype`` (None: the block returned no such stream).
        self.factors: list[list[Any] | None] = []
        self.dtypes: list[Any] = []

    def update(self, outputs: list[Any]) -> None:
        """A full compute: new factors from ``outputs`` and the previous factors."""
        delta = None if self.last_update is None else self.step - self.last_update
        factors: list[list[Any] | None] = []
        for i, features in enumerate(outputs):
            if features is None:
                factors.append(None)
                continue
            new = [features]
            previous = self.factors[i] if delta is not None and i < len(self.factors) else None
            for j in range(self.max_order if previous else 0):
                # A stale factor of another shape (e.g. a prefix dropped after the first step)
                # cannot be differenced: the expansion restarts from the orders gathered so far.
                if j >= len(previous) or previous[j].shape != new[j].shape:
                    break
                new.append((new[j] - previous[j].to(features.dtype)) / delta)
            # Order 0 is copied: the model may reuse the block's output tensor in place.
            first = new[0].to(self.dtype, copy=True)
            factors.append([first, *(f.to(self.dtype) for f in new[1:])])
        self.factors = factors
        self.dtypes = [None if o is None else o.dtype for o in outputs]
        self.last_update = self.step

    def predict(self) -> list[Any]:
        """Each stream extrapolated ``step - last_update`` calls past the last full compute."""
        assert self.last_update is not None
        offset = self.step - self.last_update
        out: list[Any] = []
        for factors, dtype in zip(self.factors, self.dtypes, strict=True):
            if factors is None:
                out.append(None)
                continue
            value = factors[0].to(dtype, copy=True)
            for order, factor in enumerate(factors[1:], start=1):
                value = value + factor.to(dtype) * (offset**order / math.factorial(order))
            out.append(value)
        return out


@functools.cache
def _taylor_hook() -> type:
    """The ModelHook subclass, built on first use (importing this module needs no diffusers)."""
    hooks = diffusers_hooks()

    class TaylorStreamHook(hooks.ModelHook):
        _is_stateful = True

        def __init__(
            self, state_manager: Any, layout: StreamLayout, interval: int, warmup: int
        ) -> None:
            super().__init__()
            self.state_manager = state_manager
            self.layout = layout
            self.interval = interval
            self.warmup = warmup

        def _should_compute(self, state: _TaylorState) -> bool:
            # diffusers' schedule, host-side: warmup calls, then every interval-th call.
            step = state.step
            due = step < self.warmup or (step - self.warmup - 1) % self.interval == 0
            return due or state.last_update is None

        def new_forward(self, module: Any, *args: Any, **kwargs: Any) -> Any:
            state: _TaylorState = self.state_manager.get_state()
            state.step += 1
            if not self._should_compute(state):
                return self.layout.join(state.predict())
            output = self.fn_ref.original_forward(*args, **kwargs)
            state.update(self.layout.outputs(output))
            return output

        def reset_state(self, module: Any) -> Any:
            self.state_manager.reset()
            return module

    return TaylorStreamHook
