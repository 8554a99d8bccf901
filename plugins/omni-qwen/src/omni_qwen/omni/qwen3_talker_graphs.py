"""Qwen3-Omni's talker decode step at static shapes, replayed as CUDA graphs.

Eager, a talker step (a 20-layer MoE decoder, one step per speech frame) costs 74 ms on an
H200, mostly kernel launches. As for the thinker (:mod:`.qwen3_thinker_graphs`), the step is
one function of ``(rows, keys, sampled)`` over device tables indexed by cache slot
(:class:`_Tables`): the previous frame's codes (every codebook), the frame index, the RoPE
delta, the request's reply-buffer row, the codes it has made (the repetition penalty) and the
sampling settings. The step does what :class:`~.qwen3_talker.TalkerStage` does: the sum of the
frame's codebook embeddings plus the projected reply entry (``ReplyBuffer.read`` on the
device: the entry at the frame's index, ``tts_eos`` at the stop token, ``tts_pad`` past it),
the talker model on :class:`omni_core.runtime.StaticSlotView`, ``codec_head``, the repetition
penalty, the suppressed control ids and :func:`omni_core.runtime.sample_rows`. It returns
codebook 0 and the hidden state the code predictor reads, gathered by slot after the run.

Captured (``decode_graphs=on``, CUDA) the talker text model's MoE experts are switched to a
capturable implementation first (:func:`.static_steps.capturable_experts`: ``eager`` reads the
device from the host in every layer); ``static`` runs the same function eagerly.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from omni_core.runtime import SlotCache, StaticSlotView, apply_repetition_penalty
from omni_core.speech import ARState, StepOutput

from .qwen3_talker import TalkerStage
from .static_steps import Settings, StaticSteps, capturable_experts, kv_shape, mrope

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from omni_core.chat import ReplyBuffer

    from .qwen3_talker import Specials


class _Tables:
    def __init__(self, slots: int, groups: int, vocab: int, device: torch.device) -> None:
        self.slots = slots

        def zeros(*shape: int, kind: torch.dtype = torch.long) -> torch.Tensor:
            return torch.zeros(shape, dtype=kind, device=device)

        self.codes, self.frames = zeros(slots, groups), zeros(slots)
        self.delta, self.chat = zeros(slots), zeros(slots)
        self.seen = zeros(slots, vocab, kind=torch.bool)
        self.settings = Settings(slots, device)


class GraphTalkerStage(TalkerStage):
    """:class:`~.qwen3_talker.TalkerStage` whose decode step is static and replayed (module
    doc); ``capture``: CUDA graphs (on CUDA), else the static step eagerly."""

    def __init__(self, specials: Specials, reply: ReplyBuffer, *, capture: bool) -> None:
        super().__init__(specials, reply)
        self.model = self.talker.model
        kv = kv_shape(self.model.config)
        self.steps = StaticSteps("qwen3-omni talker", specials.device, kv, capture)
        self.tables: _Tables | None = None
        self.experts: str | None = None
        if self.steps.runner.capture:
            self._capturable()

    def report(self) -> dict[str, Any]:
        """The runner's path and counters, and the MoE experts implementation the step runs."""
        experts = str(getattr(self.model.config, "_experts_implementation", None))
        return {**self.steps.runner.report(), "experts": experts}

    def _capturable(self) -> None:
        if self.experts is None:
            self.experts = capturable_experts(self.model, "qwen3-omni talker")

    def _tables(self, cache: SlotCache) -> _Tables:
        if self.tables is None or self.tables.slots != cache.num_slots:
            vocab = int(self.sp.suppress.shape[0])
            self.tables = _Tables(cache.num_slots, self.sp.groups, vocab, self.sp.device)
        return self.tables

    def prefill(self, states: list[ARState], cache: SlotCache) -> StepOutput:
        out = super().prefill(states, cache)
        tables = self._tables(cache)
        for state in states:
            slot = state.slot
            tables.frames[slot] = state.frames + 1  # the frame the first decode makes
            tables.delta[slot] = state.data["rope_delta"]  # device scalars: no host read
            tables.chat[slot] = int(state.data["reply_slot"])
            tables.seen[slot] = state.data["seen"]
            tables.settings.join(slot, state.data["sampling"])
        return out

    def _make(self, cache: SlotCache, rows: int, keys: int, sampled: bool) -> Callable:
        tables, view, reply, sp = (
            self._tables(cache),
            StaticSlotView(cache, rows, keys),
            self.reply,
            self.sp,
        )
        head = slice(0, rows)
        codes, frames, delta, chat = (
            t[head] for t in (tables.codes, tables.frames, tables.delta, tables.chat)
        )
        seen, penalty = tables.seen[head], tables.settings.penalty[head]
        if reply.values is None:
            raise RuntimeError("the text stage wrote nothing for the speech chain")
        values_all = reply.values
        embed = self.talker.get_input_embeddings()
        predictor = self.talker.code_predictor.model.get_input_embeddings()

        def step() -> tuple[torch.Tensor, ...]:
            parts = [embed(codes[:, 0])]
            parts += [predictor[i](codes[:, i + 1]) for i in range(sp.groups - 1)]
            frame = torch.stack(parts, dim=1).sum(1)
            # ReplyBuffer.read on the device tables (the eager stage's text embedding)
            stop = reply.stop_at[chat]
            where = (frames >= stop).long() + (frames > stop).long()
            values = values_all[chat, frames.clamp(max=reply.max_len - 1)]
            values = values * (where == 0).unsqueeze(-1).to(values.dtype)
            text = torch.where(
                (where == 0)[:, None],
                self.talker.text_projection(values.to(sp.dtype)),
                torch.where((where == 1)[:, None], sp.tts_eos, sp.tts_pad),
            )
            embeds = (frame + text)[:, None]
            hidden = self._forward(embeds, mrope(view, delta), view)
            scores = self.talker.codec_head(hidden).float()
            scores = apply_repetition_penalty(scores, seen, penalty)
            scores = scores.masked_fill(sp.suppress, float("-inf"))
            return tables.settings.pick(scores, rows, frames, sampled), hidden

        return step

    def decode(self, states: list[ARState], last: StepOutput, cache: SlotCache) -> StepOutput:
        if self.steps.runner.capture:
            self._capturable()
        tables = self._tables(cache)
        slots = tuple(s.slot for s in states)
        index = self.steps.index(slots, cache.device)
        rows, keys = self.steps.shape(slots, cache, self.sp.dtype)
        key = (rows, keys, tables.settings.sampled(slots))
        tables.codes.index_copy_(0, index, last.tokens)
        picked, hidden = self.steps.run(key, cache.num_slots, lambda *k: self._make(cache, *k))
        tables.frames.index_add_(0, index, torch.ones_like(index))
        code0 = picked.index_select(0, index)
        tables.seen[index, code0] = True
        hidden = hidden.index_select(0, index)
        return StepOutput(tokens=code0[:, None], stop=code0 == self.sp.eos, hidden=hidden)


def make_talker_stage(mode: str, device: torch.device) -> Callable[..., Any]:
    """How :class:`~.qwen3_talker.TalkerFollower` makes the talker stage under a
    ``decode_graphs`` mode: the eager stage for ``off`` (and ``on`` off CUDA), else
    :class:`GraphTalkerStage` (``static``: without capture)."""
    if mode == "off" or (mode == "on" and device.type != "cuda"):
        return TalkerStage
    return partial(GraphTalkerStage, capture=mode == "on")
