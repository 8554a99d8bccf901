"""Qwen3-TTS's decode loop at static shapes, replayed as CUDA graphs (the ``cuda_graphs`` path).
Long because the talker step, the code predictor loop and the device-side per-slot state they
share are one design, kept in one place.

The eager stages (:mod:`.stages`) launch a talker step (28 layers) and 15 code-predictor steps
(5 layers each) op by op for every frame, plus per-row Python; at small batches the GPU waits
on the host. Here both become one replayed CUDA graph per batch bucket
(:data:`omni_core.runtime.graphs.BATCH_BUCKETS`), through
:class:`omni_core.runtime.GraphRunner`:

- :class:`GraphTalkerStage`: the talker's one-token step over slots ``0..rows-1`` of the
  runtime's cache (:class:`omni_core.runtime.StaticSlotView`, keys padded to a key bucket), the
  frame embedding, the official codebook-0 logits processing and sampling inside; row ``i``
  of the graph is cache slot ``i``. Per-request state (tokens seen, frames made, sampling
  settings, trailing text) lives in :class:`SlotTables`, device tensors indexed by slot, so a
  step does no per-row Python and no per-row device writes. Prefill stays eager.
- :class:`GraphCodePredictorStage`: the whole 15-group frame loop of the code predictor, its
  short cache in static buffers (:class:`omni_core.runtime.StaticKVCache`), sampling inside.

Sampling is :func:`.stages.sample`, whose draw is the exponential-race form of
``torch.multinomial`` (``argmax(p / E)``, ``E ~ Exp(1)``: what ``multinomial`` computes for one
sample, without its host-side probability check), its noise computed on the device from each
row's seed and frame, so it is graph-safe and the same for a row in any batch bucket. Off CUDA (or
after a failed capture, reason logged) the same static-shape functions run eagerly, so greedy
codes equal the eager stages' and ``reference_generate``'s.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch

from omni_core.runtime import (
    GraphRunner,
    SlotCache,
    SlotIndex,
    StaticKVCache,
    StaticSlotView,
    batch_buckets,
    bucket_for,
    key_bucket,
    precapture,
)
from omni_core.speech import ARState, FrameStage, StepOutput

from .stages import Sampling, TalkerStage, sample

if TYPE_CHECKING:  # pragma: no cover
    from .model import Qwen3TTSModel

log = logging.getLogger("omni.qwen.tts")

#: Cache positions reserved per slot before the first capture (grown later by key bucket).
RESERVED_KEYS = 512


def pick_code0(
    model: Qwen3TTSModel,
    logits: torch.Tensor,
    seen: torch.Tensor,
    made: torch.Tensor,
    penalty: torch.Tensor,
    least: torch.Tensor,
    settings: Sampling,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Codebook 0 of rows ``[B]`` (the eager :class:`TalkerStage`'s rules) -> (code0, the
    rows' new ``seen``, new ``made``): pure, the caller stores them."""
    scores = logits.float()
    penalised = torch.where(scores < 0, scores * penalty[:, None], scores / penalty[:, None])
    scores = model.codec0_logits(torch.where(seen, penalised, scores), None, made, 1.0, least)
    code0 = sample(scores, settings, made)
    return code0, seen.scatter(1, code0[:, None], True), made + 1


class SlotTables:
    """Per-request decode state on the device, one row per cache slot (written at join)."""

    def __init__(self, model: Qwen3TTSModel, slots: int) -> None:
        device, dtype = model.device, model.dtype
        vocab, hidden = model.config.talker.dims.vocab_size, model.hidden_size

        def zeros(*shape: int, kind: torch.dtype = torch.long) -> torch.Tensor:
            return torch.zeros(shape, dtype=kind, device=device)

        self.slots = slots
        self.seen = zeros(slots, vocab, kind=torch.bool)
        self.made = zeros(slots)
        self.penalty = zeros(slots, kind=torch.float32) + 1
        self.least = zeros(slots, 1)
        self.seed = zeros(slots)
        self.sampling = {
            p: (
                zeros(slots, kind=torch.float32),
                zeros(slots),
                zeros(slots, kind=torch.float32) + 1,
            )
            for p in ("", "sub_")
        }
        self.host_temperature = {p: [0.0] * slots for p in ("", "sub_")}
        # the talker graph's inputs: each slot's previous frame and its text row
        self.codes = zeros(slots, model.num_code_groups)
        self.text = zeros(slots, hidden, kind=dtype)
        # trailing text rows of each slot, fed one per frame, then the pad row
        self.trail = zeros(slots, 1, hidden, kind=dtype)
        self.trail_len = zeros(slots)
        self.pad = zeros(slots, hidden, kind=dtype)

    def join(self, state: ARState) -> None:
        s, data = state.slot, state.data
        self.seen[s] = False
        self.made[s] = data["made"]
        self.penalty[s] = data["repetition_penalty"]
        self.least[s, 0] = data["min_new_tokens"]
        self.seed[s] = int(data["seed"])
        for prefix, (temperature, top_k, top_p) in self.sampling.items():
            value = float(data[f"{prefix}temperature"])
            temperature[s], self.host_temperature[prefix][s] = value, value
            top_k[s] = int(data[f"{prefix}top_k"])
            top_p[s] = float(data[f"{prefix}top_p"])
        prompt = data["prompt"]
        rows = int(prompt.trailing.shape[0])
        if rows > self.trail.shape[1]:  # outside any graph: the gather below reads it eagerly
            grown = self.trail.new_zeros(
                (self.slots, max(rows, 2 * self.trail.shape[1]), self.trail.shape[2])
            )
            grown[:, : self.trail.shape[1]] = self.trail
            self.trail = grown
        if rows:
            self.trail[s, :rows] = prompt.trailing
        self.trail_len[s] = rows
        self.pad[s] = prompt.pad

    def settings(self, prefix: str, rows: Any, host_slots: Any) -> Sampling:
        temperature, top_k, top_p = self.sampling[prefix]
        temps = self.host_temperature[prefix]
        return Sampling(
            temperature[rows],
            top_k[rows],
            top_p[rows],
            any(temps[s] > 0 for s in host_slots),
            self.seed[rows],
        )

    def load_inputs(self, index: torch.Tensor, codes: torch.Tensor) -> None:
        """The next step's inputs of the slots ``index``: their previous frame and text row."""
        self.codes.index_copy_(0, index, codes)
        step = self.made.index_select(0, index) - 1  # frames made so far - 1
        text = self.trail[index, step.clamp(0, self.trail.shape[1] - 1)]
        fed = (step < self.trail_len.index_select(0, index))[:, None]
        self.text.index_copy_(0, index, torch.where(fed, text, self.pad.index_select(0, index)))


class GraphTalkerStage(TalkerStage):
    """:class:`TalkerStage` with its decode step static and replayed (module doc)."""

    def __init__(self, model: Qwen3TTSModel, *, capture: bool = True) -> None:
        super().__init__(model)
        self.runner = GraphRunner("qwen3-tts talker", model.device, capture=capture)
        self.tables: SlotTables | None = None
        self._index = SlotIndex()
        self._warmed = False
        self._storage: tuple[int, ...] = ()
        self._fns: dict[tuple[int, int, bool], Any] = {}
        dims = model.config.talker.dims
        self._kv = (dims.num_hidden_layers, dims.num_key_value_heads, dims.head_dim)

    def report(self) -> dict[str, Any]:
        return self.runner.report()

    def _tables(self, cache: SlotCache) -> SlotTables:
        if self.tables is None or self.tables.slots != cache.num_slots:
            self.tables = SlotTables(self.model, cache.num_slots)
        return self.tables

    def prefill(self, states: list[ARState], cache: SlotCache) -> StepOutput:
        tables = self._tables(cache)
        for state in states:
            tables.join(state)
        hidden, logits = self._forward(
            torch.stack([s.data["prompt"].embeds for s in states]), cache
        )
        slots = [s.slot for s in states]
        rows = torch.tensor(slots, dtype=torch.long, device=cache.device)
        code0, seen, made = pick_code0(
            self.model,
            logits,
            tables.seen[rows],
            tables.made[rows],
            tables.penalty[rows],
            tables.least[rows],
            tables.settings("", rows, slots),
        )
        tables.seen[rows], tables.made[rows] = seen, made
        stop = code0 == self.model.codec_eos_id
        return StepOutput(tokens=code0[:, None], stop=stop, hidden=hidden)

    def _step_fn(self, cache: SlotCache, rows: int, keys: int, sampled: bool) -> Any:
        fn = self._fns.get((rows, keys, sampled))
        if fn is not None:
            return fn
        model, tables, view = self.model, self._tables(cache), StaticSlotView(cache, rows, keys)
        head = slice(0, rows)
        codes, text = tables.codes[head], tables.text[head]
        seen, made, penalty, least = (
            t[head] for t in (tables.seen, tables.made, tables.penalty, tables.least)
        )
        temperature, top_k, top_p = (t[head] for t in tables.sampling[""])
        settings = Sampling(temperature, top_k, top_p, sampled, tables.seed[head])

        def step() -> tuple[torch.Tensor, ...]:
            embeds = model.frame_embedding(codes, text)[:, None]
            mask = view.attention_mask(embeds.dtype)
            hidden, logits = model.talker_forward(embeds, view.position_ids(), mask, view)
            code0, new_seen, new_made = pick_code0(
                model, logits[:, -1], seen, made, penalty, least, settings
            )
            return code0, hidden[:, -1], new_seen, new_made

        self._fns[(rows, keys, sampled)] = step
        return step

    def decode(self, states: list[ARState], last: StepOutput, cache: SlotCache) -> StepOutput:
        tables = self._tables(cache)
        slots = tuple(s.slot for s in states)
        index = self._index(slots, cache.device)
        rows = min(bucket_for(max(slots) + 1), cache.num_slots)
        longest = max(cache.host_lengths[s] for s in slots) + 1
        keys = min(key_bucket(longest), cache.max_len)
        self._ensure_storage(cache, keys)
        sampled = any(tables.host_temperature[""][s] > 0 for s in slots)
        if not self._warmed:
            # the first decode (the warm-up request): capture every batch bucket in both
            # sampling modes now, so later batch sizes never wait for a capture (they run on
            # stale inputs and write only positions the real step rewrites); key buckets
            # reached later are captured when first needed
            self._warmed = True
            precapture(
                self.runner,
                [(b, keys, m) for m in (False, True) for b in batch_buckets(cache.num_slots)],
                (rows, keys, sampled),
                lambda key: self._step_fn(cache, *key),
            )
        tables.load_inputs(index, last.tokens)
        code0, hidden, seen, made = self.runner.run(
            (rows, keys, sampled), self._step_fn(cache, rows, keys, sampled)
        )
        tables.seen[:rows].copy_(seen)
        tables.made[:rows].copy_(made)
        code0 = code0.index_select(0, index)
        return StepOutput(
            tokens=code0[:, None],
            stop=code0 == self.model.codec_eos_id,
            hidden=hidden.index_select(0, index),
        )

    def _ensure_storage(self, cache: SlotCache, keys: int) -> None:
        layers, heads, dim = self._kv
        cache.reserve(
            layers, heads, dim, self.model.dtype, cache.num_slots, max(keys, RESERVED_KEYS)
        )
        key = cache.storage_key()
        if key != self._storage:  # reallocated: the graphs read the old tensors
            self.runner.clear("the cache storage grew")
            self._fns.clear()
            self._storage = key


class _PredictorBuffers:
    """One batch bucket's static inputs and short cache for the code predictor."""

    def __init__(self, model: Qwen3TTSModel, rows: int) -> None:
        device, dims = model.device, model.config.talker.code_predictor
        self.hidden = torch.zeros((rows, model.hidden_size), dtype=model.dtype, device=device)
        self.code0 = torch.zeros(rows, dtype=torch.long, device=device)
        self.temperature = torch.zeros(rows, dtype=torch.float32, device=device)
        self.top_k = torch.zeros(rows, dtype=torch.long, device=device)
        self.top_p = torch.ones(rows, dtype=torch.float32, device=device)
        self.seed = torch.zeros(rows, dtype=torch.long, device=device)
        self.frame = torch.zeros(rows, dtype=torch.long, device=device)
        self.cache = StaticKVCache(
            dims.num_hidden_layers,
            rows,
            dims.num_key_value_heads,
            model.num_code_groups,
            dims.head_dim,
            model.dtype,
            device,
        )


class GraphCodePredictorStage(FrameStage):
    """The code predictor's whole frame loop, static per batch bucket and replayed."""

    def __init__(self, talker: GraphTalkerStage, *, capture: bool = True) -> None:
        self.talker, self.model = talker, talker.model
        self.runner = GraphRunner("qwen3-tts code predictor", self.model.device, capture=capture)
        self._buffers: dict[int, _PredictorBuffers] = {}
        self._fns: dict[tuple[int, bool], Any] = {}
        self._index = SlotIndex()
        self._warmed = False

    def report(self) -> dict[str, Any]:
        return self.runner.report()

    def _step_fn(self, rows: int, sampled: bool) -> Any:
        fn = self._fns.get((rows, sampled))
        if fn is not None:
            return fn
        buffers = self._buffers.setdefault(rows, _PredictorBuffers(self.model, rows))
        settings = Sampling(
            buffers.temperature, buffers.top_k, buffers.top_p, sampled, buffers.seed
        )
        model = self.model

        def sampler(logits: torch.Tensor, group: int) -> torch.Tensor:
            return sample(logits, settings, buffers.frame, group)

        def step() -> tuple[torch.Tensor, ...]:
            buffers.cache.reset()
            codes = model.predict_codes(
                buffers.hidden, buffers.code0, sampler=sampler, cache=buffers.cache
            )
            return (codes,)

        self._fns[(rows, sampled)] = step
        return step

    def run(self, states: list[ARState], out: StepOutput) -> StepOutput:
        assert out.hidden is not None and self.talker.tables is not None
        tables, n = self.talker.tables, len(states)
        slots = tuple(s.slot for s in states)
        index = self._index(slots, out.tokens.device)
        rows = min(bucket_for(n), tables.slots)
        sampled = any(tables.host_temperature["sub_"][s] > 0 for s in slots)
        if not self._warmed:  # the first call: every bucket in both modes (as the talker)
            self._warmed = True
            precapture(
                self.runner,
                [(b, m) for m in (False, True) for b in batch_buckets(tables.slots)],
                (rows, sampled),
                lambda key: self._step_fn(*key),
            )
        fn = self._step_fn(rows, sampled)
        buffers = self._buffers[rows]
        buffers.hidden[:n].copy_(out.hidden)
        buffers.code0[:n].copy_(out.tokens[:, 0])
        for mine, table in zip(
            (buffers.temperature, buffers.top_k, buffers.top_p),
            tables.sampling["sub_"],
            strict=True,
        ):
            mine[:n].copy_(table.index_select(0, index))
        buffers.seed[:n].copy_(tables.seed.index_select(0, index))
        buffers.frame[:n].copy_(tables.made.index_select(0, index) - 1)  # counted already
        (codes,) = self.runner.run((rows, sampled), fn)
        return StepOutput(tokens=codes[:n], stop=out.stop)


def decode_stages(model: Qwen3TTSModel, mode: str) -> tuple[TalkerStage, FrameStage]:
    """The talker and code-predictor stages of ``mode`` (the ``cuda_graphs`` load option): ``on``
    (CUDA graphs on CUDA, the eager stages elsewhere), ``static`` (the static steps, no
    capture) or ``off`` (the eager stages)."""
    from .stages import CodePredictorStage

    if mode == "off" or (mode == "on" and model.device.type != "cuda"):
        return TalkerStage(model), CodePredictorStage(model)
    talker = GraphTalkerStage(model, capture=mode == "on")
    return talker, GraphCodePredictorStage(talker, capture=mode == "on")


def decode_report(mode: str, stages: tuple[Any, Any] | None) -> dict[str, Any]:
    """What :meth:`Qwen3TTSPipeline.decode_report` returns."""
    report: dict[str, Any] = {"cuda_graphs": mode, "path": "eager", "stages": None}
    if stages is not None and isinstance(stages[0], GraphTalkerStage):
        talker, predictor = stages
        parts = {"talker": talker.report(), "code_predictor": predictor.report()}
        paths = {p["path"] for p in parts.values()}
        report.update(path=paths.pop() if len(paths) == 1 else "mixed", stages=parts)
    elif stages is None:
        report["path"] = "not built yet"
    return report
