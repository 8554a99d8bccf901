"""Static-shape decode steps, captured as CUDA graphs per batch bucket and replayed.

A decode step of a small autoregressive model is bound by kernel launches and Python, not by
the GPU: dozens of layers of tiny kernels per token. This module gives a plugin the pieces to
run such a step at a fixed shape and replay it as one CUDA graph:

- :func:`bucket_for` pads a batch to one of a few sizes (:data:`BATCH_BUCKETS`), so a handful
  of graphs cover every batch (:func:`batch_buckets`: the sizes up to a limit);
- :class:`StaticSlotView` is a fixed-size view (``[:rows, :, :keys]``) of the runtime's
  :class:`~omni_core.runtime.SlotCache`, behind transformers' ``Cache`` API: row ``i`` is cache slot
  ``i``, its new key/value is written at that slot's own length by index on the device, and
  :meth:`StaticSlotView.attention_mask` / :meth:`~StaticSlotView.position_ids` are built on the
  device from the per-slot lengths, so nothing in a step depends on host values but its shape;
- :class:`StaticKVCache` is a short cache of preallocated buffers whose write offsets are
  known on the host (e.g. an inner per-frame loop of fixed length);
- :class:`GraphRunner` runs a step function per key (e.g. ``(rows, keys)``): on CUDA it warms
  the function up on a side stream, captures it in a ``torch.cuda.CUDAGraph`` (one memory pool
  shared by all its graphs) and replays it; elsewhere, or when capture fails (the reason is
  logged and kept in :attr:`GraphRunner.reason`), it calls the function eagerly: the same
  static-shape computation, so the output does not depend on the path;
- :func:`precapture` captures a list of keys at once (every batch bucket at the warm-up
  request, so no later batch size waits for a capture), and :class:`SlotIndex` keeps the device
  index of a step's slots while the batch stays the same.

A step function must read its inputs from tensors that outlive it (the runner does not copy
inputs: the caller ``copy_``'s new values into them before :meth:`GraphRunner.run`), return a
tuple of tensors, and be free of host reads (no ``.item()``, ``.tolist()``, ``if`` on a
tensor) and of side effects that a repeated call would compound (warm-up calls it more than
once): write results to its outputs and apply them after the run. The outputs of a replay live
in the graph's memory until the next replay; the runner hands out clones.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

from transformers.cache_utils import Cache

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.runtime.cache import SlotCache

log = logging.getLogger("omni.autoregressive.graphs")

#: Batch sizes a step is padded to (rows beyond the real ones compute garbage nobody reads).
BATCH_BUCKETS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
#: Key counts an attention view is padded to (then doubling past the last one).
KEY_BUCKETS: tuple[int, ...] = (256, 512, 1024, 2048, 4096)


def bucket_for(n: int, buckets: Sequence[int] = BATCH_BUCKETS) -> int:
    """The smallest bucket holding ``n``; past the last bucket, doublings of it."""
    if n < 1:
        raise ValueError("a bucket holds at least one row")
    for size in buckets:
        if n <= size:
            return size
    size = buckets[-1]
    while size < n:
        size *= 2
    return size


def key_bucket(n: int) -> int:
    """The key count (:data:`KEY_BUCKETS`) an attention view over ``n`` positions is padded to."""
    return bucket_for(n, KEY_BUCKETS)


def batch_buckets(limit: int, buckets: Sequence[int] = BATCH_BUCKETS) -> list[int]:
    """Every size ``min(bucket_for(n), limit)`` takes for ``1 <= n <= limit``, ascending."""
    return sorted({min(bucket_for(n, buckets), limit) for n in {*buckets, limit} if n <= limit})


class _FixedCache(Cache):
    """What both static caches share: transformers' ``Cache`` base, ``update`` -> ``_write``."""

    def __init__(self) -> None:
        try:
            super().__init__(layers=[])
        except TypeError:  # transformers before 4.56: a Cache takes no layers
            super().__init__()

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        *args: Any,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._write(key_states, value_states, layer_idx)

    def _write(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    @property
    def is_compileable(self) -> bool:
        return False

    @property
    def is_initialized(self) -> bool:
        return True


class StaticSlotView(_FixedCache):
    """Slots ``0..rows-1`` of a :class:`SlotCache`, ``keys`` positions each, one new token per row.

    Built for one captured shape; every value it reads (slot lengths, storage) lives on the
    device, so a replay sees the lengths of the moment. Rows whose slot is free compute garbage
    at a clamped position; their keys are masked for whoever uses the slot next (a joining
    request overwrites positions before it can attend to them).
    """

    def __init__(self, cache: SlotCache, rows: int, keys: int) -> None:
        import torch

        super().__init__()
        self.cache, self.rows, self.keys = cache, int(rows), int(keys)
        device = cache.device
        self._row_index = torch.arange(self.rows, device=device)
        self._key_index = torch.arange(self.keys, device=device)

    def lengths(self) -> torch.Tensor:
        return self.cache.lengths[: self.rows]

    def position_ids(self) -> torch.Tensor:
        """``[rows, 1]``: each slot's next position (its length)."""
        return self.lengths()[:, None]

    def attention_mask(self, dtype: torch.dtype) -> torch.Tensor:
        """``[rows, 1, 1, keys]`` additive mask: each row sees its keys up to its own length."""
        import torch

        allowed = self._key_index[None, :] <= self.lengths()[:, None]
        mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        return mask[:, None, None, :]

    def _write(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self.cache.storage(layer_idx)
        if keys.shape[0] < self.rows or keys.shape[2] < self.keys:
            raise ValueError(
                f"the cache storage holds {keys.shape[0]} x {keys.shape[2]}; this view reads "
                f"{self.rows} x {self.keys} (reserve() it first)"
            )
        if key_states.shape[0] != self.rows or key_states.shape[2] != 1:
            raise ValueError(f"a {self.rows}-row view takes one new token per row")
        where = self.lengths().clamp(max=self.keys - 1)
        keys[self._row_index, :, where] = key_states[:, :, 0].to(keys.dtype)
        values[self._row_index, :, where] = value_states[:, :, 0].to(values.dtype)
        return keys[: self.rows, :, : self.keys], values[: self.rows, :, : self.keys]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.keys - 1

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self.keys, 0

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return self.keys


class StaticKVCache(_FixedCache):
    """``layers`` x ``[rows, kv_heads, positions, head_dim]`` preallocated keys and values.

    Write offsets are host integers (the caller's loop is unrolled at capture): ``reset()``
    before each use; each ``update`` writes its tokens after the layer's previous ones and
    returns a contiguous copy of the prefix (what a ``DynamicCache`` would return, so attention
    sees the same tensors).
    """

    def __init__(
        self,
        layers: int,
        rows: int,
        kv_heads: int,
        positions: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        import torch

        super().__init__()
        shape = (rows, kv_heads, positions, head_dim)
        self._keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self._values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self._used = [0] * layers

    def reset(self) -> None:
        self._used = [0] * len(self._used)

    def _write(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        start = self._used[layer_idx]
        stop = start + key_states.shape[2]
        keys, values = self._keys[layer_idx], self._values[layer_idx]
        if stop > keys.shape[2]:
            raise ValueError(f"StaticKVCache holds {keys.shape[2]} positions; {stop} asked")
        keys[:, :, start:stop] = key_states
        values[:, :, start:stop] = value_states
        self._used[layer_idx] = stop
        return keys[:, :, :stop].contiguous(), values[:, :, :stop].contiguous()

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._used[layer_idx]

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self._used[layer_idx] + query_length, 0

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return self._keys[0].shape[2]


StepFn = Callable[[], tuple["torch.Tensor", ...]]


class GraphRunner:
    """Run static-shape step functions per key: replayed CUDA graphs, or eager (module doc).

    ``capture``: try CUDA graphs (only on a CUDA ``device``); ``generators``: custom
    ``torch.Generator`` s the steps draw from (registered with each graph so replays advance
    them; the default CUDA generator needs nothing). :attr:`path` says what runs now:
    ``"cuda-graphs"``, ``"static"`` (eager, by choice or off CUDA) or ``"static (fallback)"``
    after a failed capture (:attr:`reason`).
    """

    def __init__(
        self,
        name: str,
        device: torch.device | str,
        *,
        capture: bool = True,
        warmup: int = 2,
        generators: Sequence[torch.Generator] = (),
    ) -> None:
        import torch

        self.name = name
        self.device = torch.device(device)
        self.capture = bool(capture) and self.device.type == "cuda"
        self.warmup = max(1, int(warmup))
        self.generators = [g for g in generators if g is not None]
        self.reason: str | None = None
        self._failed = False
        if capture and self.device.type != "cuda":
            self.reason = f"no CUDA graphs on {self.device.type}: the static path runs eagerly"
        self._graphs: dict[Hashable, tuple[Any, tuple[torch.Tensor, ...]]] = {}
        self._pool: Any = None
        #: Counters a benchmark reads: graphs captured, replays, eager calls.
        self.captured = 0
        self.replays = 0
        self.eager_calls = 0

    @property
    def path(self) -> str:
        if self.capture:
            return "cuda-graphs"
        return "static (fallback)" if self._failed else "static"

    def report(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "reason": self.reason,
            "graphs": sorted(map(str, self._graphs)),
            "captured": self.captured,
            "replays": self.replays,
            "eager_calls": self.eager_calls,
        }

    def has(self, key: Hashable) -> bool:
        return key in self._graphs

    def drop(self, key: Hashable) -> None:
        """Forget ``key``'s graph, if any (its memory returns to the pool; the next run of
        ``key`` captures it again): how a caller keeps an LRU of shapes."""
        self._graphs.pop(key, None)
        self._release_pool()

    def clear(self, why: str) -> None:
        """Drop every graph (e.g. the storage they read was reallocated); they are recaptured."""
        if self._graphs:
            log.info("%s: dropping %d CUDA graphs (%s)", self.name, len(self._graphs), why)
        self._graphs.clear()
        self._release_pool()

    def disable(self, reason: str) -> None:
        """Run eagerly from now on (graphs dropped); ``reason`` is logged and reported."""
        if self.capture:
            log.warning("%s: CUDA graphs off, the static path runs eagerly: %s", self.name, reason)
        self.capture, self.reason, self._failed = False, reason, True
        self.clear(reason)

    def _release_pool(self) -> None:
        # the allocator retires a pool with its last graph: reusing the handle fails an assert
        self._pool = self._pool if self._graphs else None

    def run(self, key: Hashable, fn: StepFn) -> tuple[torch.Tensor, ...]:
        """``fn()``'s outputs for ``key``: replayed from its graph (captured on first use) or
        computed eagerly. Outputs are the caller's to keep."""
        if self.capture:
            entry = self._graphs.get(key)
            if entry is None:
                try:
                    entry = self._capture(key, fn)
                except Exception as exc:  # noqa: BLE001 (any capture failure: eager, said why)
                    self.disable(f"capture of {key!r} failed: {type(exc).__name__}: {exc}")
                    entry = None
            if entry is not None:
                graph, outputs = entry
                graph.replay()
                self.replays += 1
                return tuple(t.clone() for t in outputs)
        self.eager_calls += 1
        return self._checked(fn())

    def _checked(self, outputs: Any) -> tuple[torch.Tensor, ...]:
        import torch

        if not isinstance(outputs, tuple) or not all(isinstance(t, torch.Tensor) for t in outputs):
            raise TypeError(f"{self.name}: a step function returns a tuple of tensors")
        for t in outputs:
            if t.device.type != self.device.type:
                raise ValueError(f"{self.name}: an output is on {t.device}, not {self.device}")
        return outputs

    def _capture(self, key: Hashable, fn: StepFn) -> tuple[Any, tuple[torch.Tensor, ...]]:
        import torch

        graph = torch.cuda.CUDAGraph()
        for generator in self.generators:
            register = getattr(graph, "register_generator_state", None)
            if register is None:
                raise RuntimeError("this torch cannot register a custom generator with a graph")
            register(generator)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        # warm-up on a side stream (lazy initialisations, autotuning), as PyTorch requires
        current = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                self._checked(fn())
        current.wait_stream(side)
        torch.cuda.synchronize(self.device)
        # thread-local: request threads may use the device (prompts) while this one captures
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            outputs = self._checked(fn())
        torch.cuda.synchronize(self.device)
        self._graphs[key] = (graph, outputs)
        self.captured += 1
        log.debug("%s: captured %r", self.name, key)
        return graph, outputs


def precapture(
    runner: GraphRunner,
    keys: Sequence[Hashable],
    current: Hashable,
    make: Callable[[Any], Callable[[], tuple[torch.Tensor, ...]]],
) -> None:
    """Capture the graphs of ``keys`` (not ``current``: the caller runs it with real inputs);
    stops at the first failure (the runner is then eager)."""
    started, before = time.perf_counter(), runner.captured
    for key in keys:
        if not runner.capture:
            break
        if key != current and not runner.has(key):
            runner.run(key, make(key))
    if runner.captured > before:
        took = time.perf_counter() - started
        log.info(
            "%s: captured %d CUDA graphs in %.2f s", runner.name, runner.captured - before, took
        )


class SlotIndex:
    """The device tensor of a step's slots, rebuilt only when the slots change (a graphed
    decode step gathers its rows' outputs with it: no upload while the batch stays)."""

    def __init__(self) -> None:
        self._key: tuple[int, ...] = ()
        self._value: torch.Tensor | None = None

    def __call__(self, slots: tuple[int, ...], device: torch.device) -> torch.Tensor:
        import torch

        if slots != self._key or self._value is None:
            self._key, self._value = slots, torch.tensor(slots, dtype=torch.long, device=device)
        return self._value
