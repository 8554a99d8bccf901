"""What the Omni models' graphed decode stages share (:mod:`.qwen25_graphs`,
:mod:`.qwen3_thinker_graphs`, :mod:`.qwen3_talker_graphs`): per-slot sampling settings on the
device, the runner and step functions by shape, and the MoE experts check before a capture.

A static decode step is one function of ``(rows, keys, sampled)`` reading device tables indexed
by cache slot; :class:`StaticSteps` picks that shape for a step, reserves the cache so the
graphs keep reading the same storage, captures every batch bucket at the first decode and
replays (or runs the function eagerly: ``decode_graphs=static``, or off CUDA).

MoE layers (Qwen3-Omni's thinker and talker) run transformers' experts implementation, chosen
by ``config._experts_implementation``: ``eager`` loops over the experts a step hit, found with
``nonzero()`` and an ``if`` on a tensor, so it reads the device from the host in every layer and
a graph would freeze one step's routing; ``grouped_mm`` (transformers' default where it
dispatches) sorts the token-expert pairs by expert, counts them with ``histc`` and runs one
grouped GEMM over every expert at those device offsets, and ``batched_mm`` gathers each pair's
expert weights: fixed shapes, no host read, so both can be captured. Only ``grouped_mm``'s
native CUDA kernel, though (bfloat16 on sm80+): in float32 ATen's fallback copies the offsets to
the host and the capture fails (seen on an H200), so there ``batched_mm`` is used.
:func:`capturable_experts` switches a model to a capturable one (with transformers'
``set_experts_implementation``) before the first capture, or refuses with a
:class:`~omni_core.ConfigError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from omni_core import ConfigError
from omni_core.runtime import (
    GraphRunner,
    SlotCache,
    SlotIndex,
    StaticSlotView,
    batch_buckets,
    bucket_for,
    key_bucket,
    precapture,
    sample_rows,
)

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from omni_core.runtime import Sampling

#: Cache positions reserved per slot before the first capture (grown later by key bucket).
RESERVED_KEYS = 1024
#: transformers' experts implementations with no host read in their forward (module doc).
CAPTURABLE_EXPERTS = ("grouped_mm", "batched_mm")


class Settings:
    """Per-slot sampling settings on the device, with each slot's temperature on the host (it
    decides whether a step samples: greedy steps skip the sort)."""

    def __init__(self, slots: int, device: torch.device) -> None:
        self.temperature = torch.zeros(slots, device=device)
        self.top_p = torch.ones(slots, device=device)
        self.top_k = torch.zeros(slots, dtype=torch.long, device=device)
        self.seed = torch.zeros(slots, dtype=torch.long, device=device)
        self.penalty = torch.ones(slots, device=device)
        self.host_temperature = [0.0] * slots

    def join(self, slot: int, sampling: Sampling) -> None:
        seeded = sampling.seeded()
        self.temperature[slot] = float(sampling.temperature)
        self.top_p[slot] = float(sampling.top_p)
        self.top_k[slot] = int(sampling.top_k)
        self.seed[slot] = int(seeded.seed or 0)
        self.penalty[slot] = float(sampling.repetition_penalty)
        self.host_temperature[slot] = float(sampling.temperature)

    def sampled(self, slots: tuple[int, ...]) -> bool:
        return any(self.host_temperature[s] > 0 for s in slots)

    def pick(self, logits: torch.Tensor, rows: int, steps: torch.Tensor, sampled: bool) -> Any:
        if not sampled:
            return logits.argmax(dim=-1)
        head = slice(0, rows)
        return sample_rows(
            logits,
            temperature=self.temperature[head],
            top_p=self.top_p[head],
            top_k=self.top_k[head],
            seeds=self.seed[head],
            steps=steps,
        )


class StaticSteps:
    """What every graphed decode stage holds: the runner, the step functions by shape, the
    slot index and the cache storage the captured graphs read."""

    def __init__(self, name: str, device: torch.device, kv: tuple[int, int, int], capture: bool):
        self.runner = GraphRunner(name, device, capture=capture)
        self.index = SlotIndex()
        self.kv = kv
        self.fns: dict[tuple[int, int, bool], Callable[[], tuple[torch.Tensor, ...]]] = {}
        self.storage: tuple[int, ...] = ()
        self.warmed = False

    def shape(self, slots: tuple[int, ...], cache: SlotCache, dtype: torch.dtype) -> tuple:
        rows = min(bucket_for(max(slots) + 1), cache.num_slots)
        longest = max(cache.host_lengths[s] for s in slots) + 1
        keys = min(key_bucket(longest), cache.max_len)
        layers, heads, dim = self.kv
        cache.reserve(layers, heads, dim, dtype, cache.num_slots, max(keys, RESERVED_KEYS))
        if cache.storage_key() != self.storage:  # reallocated: the graphs read the old tensors
            self.runner.clear("the cache storage grew")
            self.fns.clear()
            self.storage = cache.storage_key()
        return rows, keys

    def run(self, key: tuple[int, int, bool], num_slots: int, make: Callable) -> Any:
        if not self.warmed:
            # the first decode (the warm-up request): every batch bucket in both sampling
            # modes now, so a later batch size never waits for a capture
            self.warmed = True
            buckets = batch_buckets(num_slots)
            keys = [(b, key[1], m) for m in (False, True) for b in buckets]
            precapture(self.runner, keys, key, lambda k: self.fn(k, make))
        return self.runner.run(key, self.fn(key, make))

    def fn(self, key: tuple[int, int, bool], make: Callable) -> Callable:
        if key not in self.fns:
            self.fns[key] = make(*key)
        return self.fns[key]


def kv_shape(config: Any) -> tuple[int, int, int]:
    """``(layers, kv heads, head dim)`` of a decoder config: what the slot cache reserves."""
    heads = int(config.num_attention_heads)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return int(config.num_hidden_layers), int(config.num_key_value_heads), int(head_dim)


class TextTables:
    """A graphed text decoder's per-slot inputs: the token it feeds, the step it samples at,
    its RoPE delta and its sampling settings."""

    def __init__(self, slots: int, device: torch.device) -> None:
        self.slots = slots
        self.tokens = torch.zeros(slots, dtype=torch.long, device=device)
        self.steps = torch.zeros(slots, dtype=torch.long, device=device)
        self.delta = torch.zeros(slots, dtype=torch.long, device=device)
        self.settings = Settings(slots, device)


def mrope(view: StaticSlotView, delta: torch.Tensor) -> torch.Tensor:
    """``[3, rows, 1]`` positions: each slot's length plus its rope delta."""
    return (view.position_ids() + delta[:, None]).unsqueeze(0).expand(3, -1, -1)


def _capturable_here(model: Any) -> tuple[str, ...]:
    """The capturable implementations on ``model``'s device and dtype: on CUDA, torch's grouped
    GEMM kernel takes bfloat16 on sm80+ only; other dtypes go through ATen's fallback, which
    copies the offsets to the host (a capture fails), so there only ``batched_mm``."""
    weight = next(model.parameters())
    if weight.device.type != "cuda":
        return CAPTURABLE_EXPERTS
    if weight.dtype == torch.bfloat16 and torch.cuda.get_device_capability(weight.device) >= (8, 0):
        return CAPTURABLE_EXPERTS
    return ("batched_mm",)


def capturable_experts(model: Any, what: str) -> str:
    """Make ``model`` (a transformers MoE model) run an experts implementation a CUDA graph can
    capture (module doc) and return it: kept if it is one here, else the first one capturable
    here (``grouped_mm``; ``batched_mm`` on CUDA below sm80 or in a dtype other than bfloat16)."""
    current = getattr(model.config, "_experts_implementation", None)
    choices = _capturable_here(model)
    if current is None or current in choices:
        return str(current)
    wanted = choices[0]
    try:
        model.set_experts_implementation(wanted)
    except (ValueError, ImportError, KeyError, RuntimeError) as exc:
        raise ConfigError(
            f"{what}: the MoE experts implementation {current!r} cannot be captured in a CUDA "
            f"graph here and {wanted!r} cannot be set ({type(exc).__name__}: {exc}); load with "
            "decode_graphs=static or off"
        ) from exc
    now = str(model.config._experts_implementation)
    if now not in choices:
        raise ConfigError(
            f"{what}: the MoE experts implementation is {now!r} after asking for {wanted!r}: "
            "it cannot be captured in a CUDA graph here; load with decode_graphs=static or off"
        )
    return now
