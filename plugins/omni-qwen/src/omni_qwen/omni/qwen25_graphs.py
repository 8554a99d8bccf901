"""Qwen2.5-Omni's thinker and talker decode steps at static shapes, replayed as CUDA graphs.

Eager, a decode step of the 7B thinker (28 layers) or of the talker launches hundreds of small
kernels, and the talker runs one step per speech code (50 per second of audio): on an H200 the
profile gave 21.5 ms per thinker step and 18.6 ms per talker step, far above what reading the
weights costs. Here each step is one function of a fixed shape ``(rows, keys, sampled)`` —
``rows`` the batch bucket of the highest slot in the step, ``keys`` the key bucket of the
longest row (:class:`omni_core.runtime.StaticSlotView` over the runtime's cache) — whose every
input is a device table indexed by cache slot (:class:`.static_steps.TextTables`,
:class:`_TalkerTables`): the previous token, the row's step, rope delta and sampling settings,
and for the talker its reply-buffer row, the codes it has seen and its frame tail. So a step
reads nothing from the host, and :class:`omni_core.runtime.GraphRunner` captures it (every batch
bucket at the first decode, a new key bucket when first reached) and replays it; off CUDA
(``decode_graphs=static``) the same static functions run eagerly, which is what the CPU tests
compare with the eager stages.

Rows of a bucket that are not in the step (free slots, a finished text row) compute garbage that
nobody reads: outputs are gathered by slot, tables are written back only for the step's slots,
and a joining request overwrites its slot's tables and cache positions before it reads them.
Sampling is :func:`omni_core.runtime.sample_rows` — the eager stages' :func:`sample_tokens` on
device tensors — so a row makes the same tokens on either path, alone or batched. The runner,
shapes and settings tables are :mod:`.static_steps` (shared with Qwen3-Omni's graphed stages).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from omni_core.chat import TextState, TokenOutput
from omni_core.runtime import SlotCache, StaticSlotView, apply_repetition_penalty
from omni_core.speech import ARState, StepOutput

from .qwen25_stages import TalkerStage, ThinkerStage
from .static_steps import Settings, StaticSteps, TextTables, kv_shape, mrope

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable


class GraphThinkerStage(ThinkerStage):
    """:class:`ThinkerStage` whose decode step is static and replayed (module doc)."""

    def __init__(self, thinker: Any, stop_ids: list[int], follow: bool, *, capture: bool) -> None:
        super().__init__(thinker, stop_ids, follow)
        kv = kv_shape(self.lm.config)
        self.steps = StaticSteps("qwen2.5-omni thinker", self.device, kv, capture)
        self.tables: TextTables | None = None

    def report(self) -> dict[str, Any]:
        return self.steps.runner.report()

    def _tables(self, cache: SlotCache) -> TextTables:
        if self.tables is None or self.tables.slots != cache.num_slots:
            self.tables = TextTables(cache.num_slots, self.device)
        return self.tables

    def prefill(self, states: list[TextState], cache: Any) -> TokenOutput:
        out = super().prefill(states, cache)
        tables = self._tables(cache)
        for state in states:
            tables.steps[state.slot] = state.tokens + 1  # the index the first decode makes
            tables.delta[state.slot] = int(state.data["rope_delta"])
            tables.settings.join(state.slot, state.data["sampling"])
        return out

    def _make(self, cache: SlotCache, rows: int, keys: int, sampled: bool) -> Callable:
        tables, view = self._tables(cache), StaticSlotView(cache, rows, keys)
        tokens, steps, delta = (t[:rows] for t in (tables.tokens, tables.steps, tables.delta))

        def step() -> tuple[torch.Tensor, ...]:
            embeds = self.embed(tokens[:, None])
            hidden = self._forward(embeds, mrope(view, delta), view)[:, -1]
            logits = self.thinker.lm_head(hidden).float()
            picked = tables.settings.pick(logits, rows, steps, sampled)
            return picked, (hidden + embeds[:, 0]) if self.follow else hidden

        return step

    def decode(self, states: list[TextState], last: TokenOutput, cache: Any) -> TokenOutput:
        tables = self._tables(cache)
        slots = tuple(s.slot for s in states)
        index = self.steps.index(slots, cache.device)
        rows, keys = self.steps.shape(slots, cache, self.embed.weight.dtype)
        key = (rows, keys, tables.settings.sampled(slots))
        tables.tokens.index_copy_(0, index, last.tokens.view(-1))
        tokens, follow = self.steps.run(key, cache.num_slots, lambda *k: self._make(cache, *k))
        tables.steps.index_add_(0, index, torch.ones_like(index))
        tokens = tokens.index_select(0, index)
        follow = follow.index_select(0, index) if self.follow else None
        return TokenOutput(tokens, torch.isin(tokens, self.stop_ids), follow, follow_lag=1)


class _TalkerTables:
    def __init__(self, slots: int, device: torch.device) -> None:
        self.slots = slots
        self.codes = torch.zeros(slots, dtype=torch.long, device=device)
        self.frames = torch.zeros(slots, dtype=torch.long, device=device)
        self.delta = torch.zeros(slots, dtype=torch.long, device=device)
        self.chat = torch.zeros(slots, dtype=torch.long, device=device)
        self.tail = torch.zeros(slots, 2, dtype=torch.long, device=device)
        self.settings = Settings(slots, device)


class GraphTalkerStage(TalkerStage):
    """:class:`TalkerStage` whose decode step is static and replayed (module doc)."""

    def __init__(self, *args: Any, capture: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        config = self.talker.model.config
        head_dim = getattr(config, "head_dim", None) or (
            config.hidden_size // config.num_attention_heads
        )
        kv = (config.num_hidden_layers, config.num_key_value_heads, head_dim)
        self.steps = StaticSteps("qwen2.5-omni talker", self.device, kv, capture)
        self.tables: _TalkerTables | None = None

    def report(self) -> dict[str, Any]:
        return self.steps.runner.report()

    def _tables(self, cache: SlotCache) -> _TalkerTables:
        if self.tables is None or self.tables.slots != cache.num_slots:
            self.tables = _TalkerTables(cache.num_slots, self.device)
        return self.tables

    def prefill(self, states: list[ARState], cache: Any) -> StepOutput:
        out = super().prefill(states, cache)
        tables = self._tables(cache)
        for state in states:
            slot = state.slot
            tables.frames[slot] = state.frames + 1  # the frame the first decode makes
            tables.delta[slot] = int(state.data["rope_delta"])
            tables.chat[slot] = int(state.data["chat_slot"])
            tables.tail[slot] = torch.tensor(state.data["frame_tail"])
            tables.settings.join(slot, state.data["talker"].sampling)
        return out

    def _make(self, cache: SlotCache, rows: int, keys: int, sampled: bool) -> Callable:
        tables, view, reply = self._tables(cache), StaticSlotView(cache, rows, keys), self.reply
        head = slice(0, rows)
        codes, frames, delta, chat = (
            t[head] for t in (tables.codes, tables.frames, tables.delta, tables.chat)
        )
        assert self.seen is not None
        seen, penalty = self.seen[head], tables.settings.penalty[head]
        if reply.values is None:
            raise RuntimeError("the text stage wrote nothing for the speech chain")
        values_all = reply.values

        def step() -> tuple[torch.Tensor, ...]:
            # ReplyBuffer.read on device tables: the entry at each row's frame, the text eos
            # embedding at the stop token, the pad embedding past it
            stop = reply.stop_at[chat]
            where = (frames >= stop).long() + (frames > stop).long()
            values = values_all[chat, frames.clamp(max=reply.max_len - 1)]
            values = values * (where == 0).unsqueeze(-1).to(values.dtype)
            ends = self.text_ends[(where - 1).clamp(min=0)]
            text = values + ends * (where > 0).unsqueeze(-1).to(ends.dtype)
            embeds = self.codec_embed(codes) + text.to(self.text_ends.dtype)
            hidden = self._forward(embeds[:, None], mrope(view, delta), view)
            logits = self.talker.codec_head(hidden).float()
            logits = apply_repetition_penalty(logits, seen, penalty)
            logits = logits.masked_fill(self.banned, float("-inf"))
            picked = tables.settings.pick(logits, rows, frames, sampled)
            return picked, hidden

        return step

    def decode(self, states: list[ARState], last: StepOutput, cache: Any) -> StepOutput:
        assert self.seen is not None
        tables = self._tables(cache)
        slots = tuple(s.slot for s in states)
        index = self.steps.index(slots, cache.device)
        rows, keys = self.steps.shape(slots, cache, self.codec_embed.weight.dtype)
        key = (rows, keys, tables.settings.sampled(slots))
        tables.codes.index_copy_(0, index, last.tokens[:, 0])
        picked, hidden = self.steps.run(key, cache.num_slots, lambda *k: self._make(cache, *k))
        tables.frames.index_add_(0, index, torch.ones_like(index))
        codes = picked.index_select(0, index)
        self.seen[index, codes] = True
        frame = torch.cat([codes[:, None], tables.tail.index_select(0, index)], dim=1)
        return StepOutput(frame, torch.isin(codes, self.stop_ids), hidden.index_select(0, index))


def make_stage(eager: type, mode: str, *args: Any) -> Any:
    """The stage of a ``decode_graphs`` mode: ``eager`` itself for ``off`` (and for ``on`` off
    CUDA), else its graphed subclass (:mod:`.qwen25_graphs`; ``static``: without capture)."""
    device = args[0].get_input_embeddings().weight.device
    if mode == "off" or (mode == "on" and device.type != "cuda"):
        return eager(*args)
    graphed = GraphThinkerStage if eager is ThinkerStage else GraphTalkerStage
    return graphed(*args, capture=mode == "on")
