"""Qwen3-Omni's thinker decode step at static shapes, replayed as CUDA graphs.

Eager, a decode step of the thinker (an MoE language model, 48 layers at real size) launches
thousands of small kernels: 113 ms per step on an H200, nearly all launch overhead. Here the
step is one function of a fixed shape ``(rows, keys, sampled)`` — ``rows`` the batch bucket of
the highest slot in the step, ``keys`` the key bucket of the longest row
(:class:`omni_core.runtime.StaticSlotView` over the runtime's cache) — whose inputs are device
tables indexed by cache slot (:class:`.static_steps.TextTables`: the previous token, the row's
step, its RoPE delta and sampling settings). Nothing in it reads the host, so
:class:`omni_core.runtime.GraphRunner` captures it (every batch bucket at the first decode, a
new key bucket when first reached) and replays it (``decode_graphs=on``, CUDA); under
``decode_graphs=static`` (or off CUDA) the same static function runs eagerly, which is what the
CPU tests compare with :class:`~.qwen3_thinker.ThinkerStage`. The shared machinery is
:mod:`.static_steps`, as for Qwen2.5-Omni's :mod:`.qwen25_graphs`.

Its outputs are the eager stage's: the sampled token (:func:`omni_core.runtime.sample_rows`,
the eager :func:`~omni_core.runtime.sample_tokens` on device tensors, same seeds and steps) and,
as ``follow`` (``follow_lag=1``), the input embedding of the token the step fed. Rows of a
bucket outside the step compute garbage nobody reads: outputs are gathered by slot, and a
joining request overwrites its slot's tables and cache positions before it reads them.

MoE experts: the step runs transformers' own decoder layers, whose experts implementation is
``config._experts_implementation``. ``eager`` loops over the hit experts with host reads in
every layer and cannot be captured; before its first capture the stage switches the thinker's
text model to ``grouped_mm`` (device offsets from ``histc``, one grouped GEMM per projection;
bfloat16) or ``batched_mm`` (other dtypes on CUDA, where torch's grouped GEMM reads its offsets
on the host), or refuses with a :class:`~omni_core.ConfigError`
(:func:`.static_steps.capturable_experts`). The uncaptured static path keeps the loaded
implementation, as the eager stage does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from omni_core.chat import TextState, TokenOutput
from omni_core.runtime import SlotCache, StaticSlotView

from .qwen3_thinker import ThinkerStage
from .static_steps import StaticSteps, TextTables, capturable_experts, kv_shape, mrope

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable


class GraphThinkerStage(ThinkerStage):
    """:class:`~.qwen3_thinker.ThinkerStage` whose decode step is static and replayed (module
    doc); ``capture``: CUDA graphs (on CUDA), else the static step eagerly."""

    def __init__(self, model: Any, stop_ids: list[int], *, follow: bool, capture: bool) -> None:
        super().__init__(model, stop_ids, follow=follow)
        self.lm = self.thinker.model.language_model
        self.embed = self.thinker.get_input_embeddings()
        self.steps = StaticSteps(
            "qwen3-omni thinker", self.device, kv_shape(self.lm.config), capture
        )
        self.tables: TextTables | None = None
        self.experts: str | None = None  # the implementation checked for capture
        if self.steps.runner.capture:
            self._capturable()

    def report(self) -> dict[str, Any]:
        """The runner's path and counters, and the MoE experts implementation the step runs."""
        experts = str(getattr(self.lm.config, "_experts_implementation", None))
        return {**self.steps.runner.report(), "experts": experts}

    def _capturable(self) -> None:
        if self.experts is None:
            self.experts = capturable_experts(self.lm, "qwen3-omni thinker")

    def _tables(self, cache: SlotCache) -> TextTables:
        if self.tables is None or self.tables.slots != cache.num_slots:
            self.tables = TextTables(cache.num_slots, self.device)
        return self.tables

    def prefill(self, states: list[TextState], cache: SlotCache) -> TokenOutput:
        out = super().prefill(states, cache)
        tables = self._tables(cache)
        for state in states:
            slot = state.slot
            tables.steps[slot] = state.tokens + 1  # the step the first decode samples at
            tables.delta[slot] = state.data["rope_delta"]  # a device scalar: no host read
            tables.settings.join(slot, state.data["sampling"])
        return out

    def _make(self, cache: SlotCache, rows: int, keys: int, sampled: bool) -> Callable:
        tables, view = self._tables(cache), StaticSlotView(cache, rows, keys)
        tokens, steps, delta = (t[:rows] for t in (tables.tokens, tables.steps, tables.delta))

        def step() -> tuple[torch.Tensor, ...]:
            embeds = self.embed(tokens[:, None])
            out = self.lm(
                inputs_embeds=embeds,
                position_ids=self._positions(view.position_ids(), mrope(view, delta)),
                attention_mask=view.attention_mask(self.dtype),
                cache=view,
                use_cache=True,
            )
            logits = self.thinker.lm_head(out.last_hidden_state[:, -1]).float()
            picked = tables.settings.pick(logits, rows, steps, sampled)
            return (picked, embeds[:, 0]) if self.follow else (picked,)

        return step

    def decode(self, states: list[TextState], last: TokenOutput, cache: SlotCache) -> TokenOutput:
        if self.steps.runner.capture:
            self._capturable()
        tables = self._tables(cache)
        slots = tuple(s.slot for s in states)
        index = self.steps.index(slots, cache.device)
        rows, keys = self.steps.shape(slots, cache, self.dtype)
        key = (rows, keys, tables.settings.sampled(slots))
        tables.tokens.index_copy_(0, index, last.tokens.view(-1))
        outs = self.steps.run(key, cache.num_slots, lambda *k: self._make(cache, *k))
        tables.steps.index_add_(0, index, torch.ones_like(index))
        tokens = outs[0].index_select(0, index)
        stop = torch.isin(tokens, self.stop_ids)
        if not self.follow:
            return TokenOutput(tokens=tokens, stop=stop)
        return TokenOutput(tokens, stop, outs[1].index_select(0, index), follow_lag=1)


def make_thinker_stage(mode: str, model: Any, stop_ids: list[int], *, follow: bool) -> Any:
    """The thinker stage of a ``decode_graphs`` mode: the eager stage for ``off`` (and for
    ``on`` off CUDA), else :class:`GraphThinkerStage` (``static``: without capture)."""
    device = next(model.thinker.parameters()).device
    if mode == "off" or (mode == "on" and device.type != "cuda"):
        return ThinkerStage(model, stop_ids, follow=follow)
    return GraphThinkerStage(model, stop_ids, follow=follow, capture=mode == "on")
