"""The runtime-owned KV cache: one slot per request, behind transformers' ``Cache`` API.

:class:`SlotCache` holds, per decoder layer, keys and values of shape
``[slots, kv_heads, positions, head_dim]`` with that layer's dtype, grown by doubling (between
steps, a device copy) up to ``num_slots`` x ``max_len`` as requests join and grow, so memory
follows what is in flight. The runtime *binds* a batch before each forward: which slot each
batch row uses, and how many new tokens each row adds (the same for every row: the whole prompt
of one request at prefill, one token per row at decode). A transformers decoder layer then calls
``update`` as it would on a ``DynamicCache``; the new keys land at each row's own length and the
layer gets back the keys of its rows up to the longest one. :meth:`attention_mask` and
:meth:`position_ids` give the matching 4D additive mask and positions, built on the device from
per-slot lengths that stay on the device: no host synchronisation per step.

Rows shorter than the longest see masked padding; a contiguous run of slots is read as a view
(no copy), any other set of slots is gathered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from transformers.cache_utils import Cache

if TYPE_CHECKING:  # pragma: no cover
    import torch


class CacheFullError(RuntimeError):
    """A request needs more positions than the cache holds (``max_len``)."""


class SlotCache(Cache):
    """A KV cache of ``num_slots`` requests of up to ``max_len`` positions each."""

    def __init__(self, num_slots: int, max_len: int, device: torch.device | str) -> None:
        import torch

        try:
            super().__init__(layers=[])
        except TypeError:  # transformers before 4.56: a Cache takes no layers
            super().__init__()
        self.num_slots, self.max_len = int(num_slots), int(max_len)
        self.device = torch.device(device)
        self._keys: dict[int, torch.Tensor] = {}
        self._values: dict[int, torch.Tensor] = {}
        #: Tokens held per slot, on the device (read by masks and positions) and on the host
        #: (the host copy only sizes tensors; it is kept in step without reading the device).
        self.lengths = torch.zeros(self.num_slots, dtype=torch.long, device=self.device)
        self.host_lengths = [0] * self.num_slots
        self._slots: list[int] = []
        self._slot_index: torch.Tensor | None = None
        self._new = 0
        self._bound_key: tuple[int, ...] = ()
        self._positions: torch.Tensor | None = None

    # -- binding (the runtime) ---------------------------------------------------------------

    def bind(self, slots: list[int], new_tokens: int) -> None:
        """Make the next forward write ``new_tokens`` per row into ``slots`` (row order)."""
        import torch

        longest = max(self.host_lengths[s] for s in slots) + new_tokens
        if longest > self.max_len:
            raise CacheFullError(
                f"a request needs {longest} cache positions; the cache holds {self.max_len}"
            )
        key = tuple(slots)
        if key != self._bound_key:  # batch composition changed: one small upload
            self._slot_index = torch.tensor(slots, dtype=torch.long, device=self.device)
            self._bound_key = key
        self._slots = list(slots)
        self._new = int(new_tokens)
        assert self._slot_index is not None
        steps = torch.arange(self._new, device=self.device)
        self._positions = self.lengths.index_select(0, self._slot_index)[:, None] + steps[None, :]

    def advance(self) -> None:
        """After the forward: the bound rows now hold ``new_tokens`` more."""
        import torch

        assert self._slot_index is not None
        self.lengths.index_add_(0, self._slot_index, torch.full_like(self._slot_index, self._new))
        for slot in self._slots:
            self.host_lengths[slot] += self._new

    def reset_slot(self, slot: int) -> None:
        """Free ``slot`` for the next request (its old keys are masked out, not cleared)."""
        self.lengths[slot] = 0
        self.host_lengths[slot] = 0

    @property
    def batch_size(self) -> int:  # transformers reads it on some paths
        return len(self._slots)

    def _view_len(self) -> int:
        return max(self.host_lengths[s] for s in self._slots) + self._new

    def _contiguous(self) -> slice | None:
        first = self._slots[0]
        if self._slots == list(range(first, first + len(self._slots))):
            return slice(first, first + len(self._slots))
        return None

    # -- what the model reads ----------------------------------------------------------------

    def position_ids(self) -> torch.Tensor:
        """``[rows, new_tokens]``: each row's positions continue from its own length."""
        assert self._positions is not None, "bind() a batch first"
        return self._positions

    def attention_mask(self, dtype: torch.dtype) -> torch.Tensor:
        """``[rows, 1, new_tokens, keys]`` additive mask: causal, and each row's own length."""
        import torch

        keys = torch.arange(self._view_len(), device=self.device)
        allowed = keys[None, None, :] <= self.position_ids()[:, :, None]
        mask = torch.zeros(allowed.shape, dtype=dtype, device=self.device)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        return mask[:, None]

    # -- transformers' Cache API ------------------------------------------------------------

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        *args: Any,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:

        keys, values = self._grown(layer_idx, key_states, value_states)
        assert self._slot_index is not None
        # rows x new positions -> (slot, position) pairs; values go in as [rows, new, heads, dim]
        positions = self.position_ids()
        rows = self._slot_index[:, None].expand_as(positions)
        keys[rows, :, positions] = key_states.transpose(1, 2).to(keys.dtype)
        values[rows, :, positions] = value_states.transpose(1, 2).to(values.dtype)
        length = self._view_len()
        run = self._contiguous()
        if run is not None:
            return keys[run, :, :length], values[run, :, :length]
        index = self._slot_index
        return (
            keys[:, :, :length].index_select(0, index),
            values[:, :, :length].index_select(0, index),
        )

    def _grown(
        self, layer_idx: int, key_states: torch.Tensor, value_states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's storage, grown (doubling, up to the limits) to hold the bound rows."""
        import torch

        need_slots = max(self._slots) + 1
        need_len = self._view_len()
        keys = self._keys.get(layer_idx)
        if keys is not None and keys.shape[0] >= need_slots and keys.shape[2] >= need_len:
            return keys, self._values[layer_idx]
        have_slots, have_len = (0, 0) if keys is None else (keys.shape[0], keys.shape[2])
        slots = min(self.num_slots, max(need_slots, 2 * have_slots, 4))
        length = min(self.max_len, max(need_len, 2 * have_len, 256))
        _, heads, _, dim = key_states.shape
        grown = []
        for old, like in ((keys, key_states), (self._values.get(layer_idx), value_states)):
            new = torch.zeros((slots, heads, length, dim), dtype=like.dtype, device=self.device)
            if old is not None:
                new[: old.shape[0], :, : old.shape[2]] = old
            grown.append(new)
        self._keys[layer_idx], self._values[layer_idx] = grown
        return grown[0], grown[1]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return max((self.host_lengths[s] for s in self._slots), default=0)

    # -- static-shape steps (omni_core.runtime.graphs) --------------------------------

    def storage(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``layer_idx``'s whole key and value storage ``[slots, heads, positions, dim]``."""
        return self._keys[layer_idx], self._values[layer_idx]

    def reserve(
        self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, slots: int, length: int
    ) -> None:
        """Grow every layer's storage now to at least ``slots`` x ``length`` (capped at the
        limits), so that captured steps keep reading the same tensors."""
        import torch

        slots, length = min(slots, self.num_slots), min(length, self.max_len)
        for layer in range(layers):
            old_keys = self._keys.get(layer)
            have = (0, 0) if old_keys is None else (old_keys.shape[0], old_keys.shape[2])
            if have[0] >= slots and have[1] >= length:
                continue
            shape = (max(slots, have[0]), kv_heads, max(length, have[1]), head_dim)
            grown = []
            for old in (old_keys, self._values.get(layer)):
                new = torch.zeros(
                    shape, dtype=dtype if old is None else old.dtype, device=self.device
                )
                if old is not None:
                    new[: old.shape[0], :, : old.shape[2]] = old
                grown.append(new)
            self._keys[layer], self._values[layer] = grown

    def storage_key(self) -> tuple[int, ...]:
        """Changes whenever storage is reallocated (captured steps must then be recaptured)."""
        keys = self._keys.get(0)
        return () if keys is None else (keys.data_ptr(), *keys.shape)

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self._view_len(), 0

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return self.max_len

    @property
    def is_compileable(self) -> bool:
        return False

    @property
    def is_initialized(self) -> bool:
        return bool(self._keys)
