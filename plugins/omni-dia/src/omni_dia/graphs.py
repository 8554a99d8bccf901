"""Dia's decode step at static shapes, replayed as CUDA graphs (the ``cuda_graphs`` load option).

Eager, a decode step of Dia-1.6B launches the 18 decoder layers op by op (self attention, cross
attention, MLP) for two rows per request, then ``generate()``'s logits processors: on an H200
about 40 ms a step, far above what reading the weights costs. Here the whole step is one
function of a fixed shape ``(rows, keys, text, sampled)`` that
:class:`omni_core.runtime.GraphRunner` captures and replays:

- ``rows``: the batch bucket of the highest slot in the step; the decoder runs over cache rows
  ``0 .. 2 * rows - 1`` of :class:`~omni_dia.stages.DiaDecoder`'s slot cache (a request's
  conditioned row beside its unconditioned one) through
  :class:`omni_core.runtime.StaticSlotView`, keys padded to ``keys`` (a key bucket);
- cross attention reads every slot's encoder keys and values from fixed storage
  (:class:`CrossStorage`, written when a request joins), its text padded to ``text`` (the
  storage's text bucket) and masked on the device from each row's text length;
- the previous position's codes, the logits processors, sampling and the undelayed frames are
  :meth:`DiaDecoder.advance` over the slot tables' first ``rows`` rows: pure, so the runner may
  call it more than once; its new table values are written back after the run.

Rows of a bucket that are not in the step (free slots) compute garbage nobody reads: outputs
are gathered by slot, and a joining request overwrites its slot's tables, cache positions and
text before it reads them. Prefill stays eager. Off CUDA (``cuda_graphs=static``) the same
static function runs eagerly: what the CPU tests compare with the eager stage and ``generate()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from omni_core.runtime import (
    GraphRunner,
    SlotCache,
    SlotIndex,
    StaticSlotView,
    batch_buckets,
    bucket_for,
    key_bucket,
    precapture,
)
from omni_core.speech import ARState, StepOutput
from transformers import DynamicCache, EncoderDecoderCache

from omni_dia.stages import DiaDecoder, text_mask

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from transformers import DiaForConditionalGeneration

#: Self-attention positions reserved per cache row before the first capture (grown later by
#: key bucket).
RESERVED_KEYS = 512
#: Text lengths (bytes) the cross-attention storage is padded to; Dia's encoder reads 1024.
TEXT_BUCKETS = (128, 256, 512, 1024)


class CrossStorage:
    """Every slot's cross-attention keys and values, ``[2 * slots, heads, text, dim]`` per
    layer (a request's two rows side by side, its text padded to the storage's bucket), and
    each row's text length: what a static step reads instead of a per-batch stack."""

    def __init__(self, model: DiaForConditionalGeneration, rows: int) -> None:
        config = model.config.decoder_config
        self.layers, self.rows = config.num_hidden_layers, rows
        self.heads, self.dim = config.cross_num_key_value_heads, config.cross_head_dim
        self.dtype, self.device = model.dtype, model.device
        self.text = 0
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.lengths = torch.zeros(rows, dtype=torch.long, device=self.device)

    def fit(self, text: int) -> bool:
        """Hold texts of ``text`` bytes (growing to its bucket); True: the storage was
        reallocated (graphs that read the old tensors must go)."""
        need = bucket_for(text, TEXT_BUCKETS)
        if need <= self.text:
            return False
        shape = (self.rows, self.heads, need, self.dim)
        grown = []
        for old in (*self.keys, *self.values):
            new = torch.zeros(shape, dtype=self.dtype, device=self.device)
            new[:, :, : old.shape[2]] = old
            grown.append(new)
        if not grown:
            grown = [torch.zeros(shape, dtype=self.dtype, device=self.device)]
            grown = grown + [torch.zeros_like(grown[0]) for _ in range(2 * self.layers - 1)]
        self.keys, self.values = grown[: self.layers], grown[self.layers :]
        self.text = need
        return True

    def write(self, state: ARState) -> None:
        """A joining request's keys and values (both rows) into its slot's rows."""
        rows = slice(2 * state.slot, 2 * state.slot + 2)
        length = int(state.data["encoder"].shape[1])
        for layer in range(self.layers):
            self.keys[layer][rows, :, :length] = state.data["cross_keys"][layer]
            self.values[layer][rows, :, :length] = state.data["cross_values"][layer]
        self.lengths[rows] = length

    def cache(self, self_attention: Any, rows: int) -> EncoderDecoderCache:
        """transformers' encoder-decoder cache whose cross-attention layers are views of the
        storage's first ``rows`` rows (read in place by every replay)."""
        cross = DynamicCache()
        for layer, (keys, values) in enumerate(zip(self.keys, self.values, strict=True)):
            cross.update(keys[:rows, :, :0], values[:rows, :, :0], layer)  # makes the layer
            cross.layers[layer].keys, cross.layers[layer].values = keys[:rows], values[:rows]
        both = EncoderDecoderCache(self_attention, cross)
        for layer in range(self.layers):
            both.is_updated[layer] = True
        return both


class GraphDiaDecoder(DiaDecoder):
    """:class:`DiaDecoder` whose decode step is static and replayed (module doc)."""

    def __init__(
        self,
        model: DiaForConditionalGeneration,
        *,
        slots: int,
        max_len: int,
        lookahead: int,
        capture: bool = True,
    ) -> None:
        super().__init__(model, slots=slots, max_len=max_len, lookahead=lookahead)
        config = model.config.decoder_config
        self.runner = GraphRunner("dia decoder", model.device, capture=capture)
        self.text = CrossStorage(model, 2 * slots)
        self._kv = (config.num_hidden_layers, config.num_key_value_heads, config.head_dim)
        self._fns: dict[tuple[int, int, int, bool], Callable[[], tuple[torch.Tensor, ...]]] = {}
        self._rows = SlotIndex()
        self._storage: tuple[int, ...] = ()
        self._warmed = False

    def report(self) -> dict[str, Any]:
        return self.runner.report()

    def _regraph(self, why: str) -> None:
        self.runner.clear(why)
        self._fns.clear()

    def prefill(self, states: list[ARState], cache: SlotCache) -> StepOutput:
        out = super().prefill(states, cache)
        if self.text.fit(max(int(s.data["encoder"].shape[1]) for s in states)):
            self._regraph("the text storage grew")
        for state in states:
            self.text.write(state)
        return out

    def _reserve(self, keys: int) -> None:
        layers, heads, dim = self._kv
        rows = self.cache.num_slots
        self.cache.reserve(layers, heads, dim, self.model.dtype, rows, max(keys, RESERVED_KEYS))
        if self.cache.storage_key() != self._storage:  # reallocated: graphs read the old tensors
            self._regraph("the cache storage grew")
            self._storage = self.cache.storage_key()

    def _fn(self, key: tuple[int, int, int, bool]) -> Callable[[], tuple[torch.Tensor, ...]]:
        fn = self._fns.get(key)
        if fn is not None:
            return fn
        rows, keys, text, sampled = key
        dtype, device = self.model.dtype, self.model.device
        view = StaticSlotView(self.cache, 2 * rows, keys)
        both = self.text.cache(view, 2 * rows)
        lengths = self.text.lengths[: 2 * rows]
        head = {name: table[:rows] for name, table in self.tables.items()}
        # cross attention reads the cache; the states only give it their shape
        shape = torch.zeros((), dtype=dtype, device=device).expand(2 * rows, text, 1)
        row = torch.arange(rows, device=device)
        decoder = self.model.model.decoder

        def step() -> tuple[torch.Tensor, ...]:
            previous = (head["position"] - 1) % self.window
            ids = head["history"][row, previous].repeat_interleave(2, dim=0)[:, None]
            hidden = decoder(
                input_ids=ids,
                position_ids=view.position_ids(),
                attention_mask=view.attention_mask(dtype),
                encoder_hidden_states=shape,
                encoder_attention_mask=text_mask(lengths, text, dtype),
                cache=both,
                use_cache=True,
            ).last_hidden_state[:, -1]
            outputs, state = self.advance(hidden, head, sampled)
            return (*outputs, *(state[name] for name in self.STATE))

        self._fns[key] = step
        return step

    def decode(self, states: list[ARState], last: StepOutput, cache: SlotCache) -> StepOutput:
        slots = tuple(s.slot for s in states)
        index = self._rows(slots, self.delays.device)
        rows = min(bucket_for(max(slots) + 1), self.slots)
        longest = max(self.cache.host_lengths[2 * s] for s in slots) + 1
        keys = min(key_bucket(longest), self.cache.max_len)
        self._reserve(keys)
        key = (rows, keys, self.text.text, any(self.sampled[s] for s in slots))
        if not self._warmed:
            # the first decode (the warm-up request): every batch bucket in both sampling modes
            # now, so a later batch size never waits for a capture (they run on the current
            # inputs and write only cache positions the real step rewrites)
            self._warmed = True
            buckets = batch_buckets(self.slots)
            wanted = [(b, *key[1:3], m) for m in (False, True) for b in buckets]
            precapture(self.runner, wanted, key, self._fn)
        self.cache.bind([2 * s + branch for s in slots for branch in (0, 1)], 1)
        frames, stop, is_audio, *state = self.runner.run(key, self._fn(key))
        self.cache.advance()
        for name, value in zip(self.STATE, state, strict=True):
            self.tables[name][:rows].copy_(value)
        return StepOutput(
            tokens=frames.index_select(0, index),
            stop=stop.index_select(0, index),
            is_audio=is_audio.index_select(0, index),
        )


def decoder_stage(
    model: DiaForConditionalGeneration, mode: str, *, slots: int, max_len: int, lookahead: int
) -> DiaDecoder:
    """The decoder stage of a ``cuda_graphs`` mode: ``on`` (CUDA graphs on CUDA, the eager
    stage elsewhere), ``static`` (the static step without capture) or ``off`` (eager)."""
    sizes = {"slots": slots, "max_len": max_len, "lookahead": lookahead}
    if mode == "off" or (mode == "on" and model.device.type != "cuda"):
        return DiaDecoder(model, **sizes)
    return GraphDiaDecoder(model, capture=mode == "on", **sizes)


def decode_report(mode: str, decoder: DiaDecoder | None) -> dict[str, Any]:
    """What :meth:`~omni_dia.pipeline.DiaPipeline.decode_report` returns."""
    report: dict[str, Any] = {"cuda_graphs": mode, "path": "not built yet", "decoder": None}
    if isinstance(decoder, GraphDiaDecoder):
        report.update(path=decoder.runner.path, decoder=decoder.report())
    elif decoder is not None:
        report["path"] = "eager"
    return report
