"""Qwen3-Omni's code predictor frame loop at static shapes, replayed as CUDA graphs.

Eager, :class:`~.qwen3_talker.CodePredictorStage` runs transformers' 5-layer code predictor 15
times per speech frame (a two-token prefill of the talker's hidden state and codebook 0, then
one forward per codebook), op by op: about 70 ms per frame on an H200, most of it kernel
launches, against the 80 ms of audio a frame carries. Here the whole loop is one function of
the batch bucket ``rows`` (:data:`omni_core.runtime.graphs.BATCH_BUCKETS`) over static buffers:
the rows' hidden states, codebook 0 and sampling settings, and the predictor's short cache in
:class:`omni_core.runtime.StaticKVCache` (reset at the start; every write offset is a host
integer, so the loop unrolls at capture). :class:`omni_core.runtime.GraphRunner` captures it
per bucket (greedy and sampled apart) and replays it; transformers' own modules run inside.

Sampling is :func:`omni_core.runtime.sample_rows` with the same settings, seeds and steps as the
eager stage's :func:`omni_core.runtime.sample_tokens` (greedy steps take the argmax in both), so
a row makes the same codes on either path, alone or in any bucket. The settings live in
per-slot device tables (:class:`_SlotSettings`) written when a request joins, and each slot's
frame counter is advanced on the device: a frame uploads nothing from the host (an upload from
pageable memory would wait for the queued GPU work, once per frame). Rows of a bucket past the
step's compute garbage nobody reads. Off CUDA (``decode_graphs=static``) or after a failed
capture (the reason is logged and in :meth:`GraphCodePredictorStage.report`) the same static
function runs eagerly: that is what the CPU tests compare with the eager stage.
"""

from __future__ import annotations

from typing import Any

import torch

from omni_core.runtime import (
    GraphRunner,
    SlotIndex,
    StaticKVCache,
    batch_buckets,
    bucket_for,
    precapture,
    sample_rows,
)
from omni_core.speech import ARState, FrameStage, StepOutput


class _Buffers:
    """The static inputs of one batch bucket, and the predictor's cache."""

    def __init__(self, specials: Any, rows: int) -> None:
        predictor = specials.talker.code_predictor
        config = predictor.config
        device, dtype = specials.device, specials.dtype

        def zeros(*shape: int, kind: torch.dtype = torch.long) -> torch.Tensor:
            return torch.zeros(shape, dtype=kind, device=device)

        self.hidden = zeros(rows, int(config.hidden_size), kind=dtype)
        self.code0 = zeros(rows)
        self.temperature = zeros(rows, kind=torch.float32)
        self.top_p = zeros(rows, kind=torch.float32) + 1
        self.top_k = zeros(rows)
        self.seeds = zeros(rows)
        self.steps = zeros(rows)
        heads = int(config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        self.cache = StaticKVCache(
            int(config.num_hidden_layers),
            rows,
            int(config.num_key_value_heads),
            specials.groups,  # the 2-token prefill, then one position per later codebook
            head_dim,
            dtype,
            device,
        )


class _SlotSettings:
    """The predictor's sampling settings and frame counter per cache slot, on the device, and
    the requests they were written for (held, so a new request is never taken for an old one)."""

    def __init__(self, slots: int, device: torch.device) -> None:
        self.slots = slots
        self.temperature = torch.zeros(slots, device=device)
        self.top_p = torch.ones(slots, device=device)
        self.top_k = torch.zeros(slots, dtype=torch.long, device=device)
        self.seed = torch.zeros(slots, dtype=torch.long, device=device)
        self.frames = torch.zeros(slots, dtype=torch.long, device=device)
        self.owner: dict[int, ARState] = {}
        self.host_temperature = [0.0] * slots

    def join(self, state: ARState) -> None:
        """Write ``state``'s settings into its slot (scalar fills: no host wait)."""
        slot, sampling = state.slot, state.data["predictor_sampling"].seeded()
        self.owner[slot] = state
        self.temperature[slot] = float(sampling.temperature)
        self.top_p[slot] = float(sampling.top_p)
        self.top_k[slot] = int(sampling.top_k)
        self.seed[slot] = int(sampling.seed or 0)
        self.frames[slot] = int(state.frames)
        self.host_temperature[slot] = float(sampling.temperature)


class GraphCodePredictorStage(FrameStage):
    """The code predictor's frame loop, static per batch bucket and replayed (module doc).
    ``specials``: the talker's :class:`~.qwen3_talker.Specials`."""

    def __init__(self, specials: Any, *, capture: bool = True, max_rows: int = 1) -> None:
        self.sp = specials
        #: The speech chain's batch limit: every bucket up to it is captured at the first
        #: frame, so no later answer waits for a capture (a joining second answer did: its
        #: first audio took a capture longer).
        self.max_rows = max_rows
        self._precaptured = False
        self._settings: _SlotSettings | None = None
        self._index = SlotIndex()
        #: The requests of the last frame, in row order (held: their ids stay theirs).
        self._rows: list[ARState] = []
        self._sampled = False
        self.predictor = specials.talker.code_predictor
        self.embed = specials.talker.get_input_embeddings()
        self.runner = GraphRunner("qwen3-omni code predictor", specials.device, capture=capture)
        self._buffers: dict[int, _Buffers] = {}
        self._fns: dict[tuple[int, bool], Any] = {}

    def report(self) -> dict[str, Any]:
        return self.runner.report()

    def _step_fn(self, rows: int, sampled: bool) -> Any:
        fn = self._fns.get((rows, sampled))
        if fn is not None:
            return fn
        b = self._buffers.setdefault(rows, _Buffers(self.sp, rows))
        predictor, groups = self.predictor, self.sp.groups

        def pick(logits: torch.Tensor, group: int) -> torch.Tensor:
            if not sampled:
                return logits.argmax(dim=-1)
            return sample_rows(
                logits,
                temperature=b.temperature,
                top_p=b.top_p,
                top_k=b.top_k,
                seeds=b.seeds,
                steps=b.steps + group,
            )

        def step() -> tuple[torch.Tensor, ...]:
            b.cache.reset()
            embeds = torch.stack([b.hidden, self.embed(b.code0)], dim=1)
            result = predictor(inputs_embeds=embeds, cache=b.cache, use_cache=True)
            codes = [b.code0]
            for group in range(1, groups):
                code = pick(result.logits[:, -1].float(), group)
                codes.append(code)
                if group < groups - 1:
                    result = predictor(
                        input_ids=code[:, None],
                        cache=b.cache,
                        use_cache=True,
                        generation_steps=group,
                    )
            return (torch.stack(codes, dim=1),)

        self._fns[(rows, sampled)] = fn = step
        return fn

    def _rejoin(self, states: list[ARState]) -> None:
        """The rows changed (a request joined or left): write the new requests' settings."""
        slots = max(self.max_rows, max(s.slot for s in states) + 1)
        if self._settings is None or self._settings.slots < slots:
            self._settings = _SlotSettings(slots, self.sp.device)
        table = self._settings
        for state in states:
            if table.owner.get(state.slot) is not state:
                table.join(state)
        self._rows = list(states)
        self._sampled = any(table.host_temperature[s.slot] > 0 for s in states)

    def run(self, states: list[ARState], out: StepOutput) -> StepOutput:
        assert out.hidden is not None
        n = len(states)
        rows = bucket_for(n)
        if len(states) != len(self._rows) or any(
            a is not b for a, b in zip(states, self._rows, strict=True)
        ):
            self._rejoin(states)
        table, sampled = self._settings, self._sampled
        assert table is not None
        index = self._index(tuple(s.slot for s in states), table.frames.device)
        fn = self._step_fn(rows, sampled)
        b = self._buffers[rows]
        b.hidden[:n].copy_(out.hidden)
        b.code0[:n].copy_(out.tokens[:, 0])
        if sampled:  # the eager stage's settings, seeds and steps, gathered on the device
            b.temperature[:n] = table.temperature[index]
            b.top_p[:n] = table.top_p[index]
            b.top_k[:n] = table.top_k[index]
            b.seeds[:n] = table.seed[index]
            b.steps[:n] = table.frames[index] * self.sp.groups
        if not self._precaptured:
            self._precaptured = True
            keys = [(r, s) for r in batch_buckets(self.max_rows) for s in (False, True)]
            precapture(self.runner, keys, (rows, sampled), lambda key: self._step_fn(*key))
        (codes,) = self.runner.run((rows, sampled), fn)
        table.frames.index_add_(0, index, torch.ones_like(index))  # the runtime's frames += 1
        return StepOutput(tokens=codes[:n], stop=out.stop)
