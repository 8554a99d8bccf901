"""Dia's step as omni stages: the decoder over delayed codebooks, then DAC.

One step of transformers' ``DiaForConditionalGeneration.generate()`` makes one *position* of
nine codebooks, each delayed by the checkpoint's ``delay_pattern`` (``[0, 8, ..., 15]``): the
decoder reads the last position's codes (its text from the encoder's states, through cross
attention), classifier-free guidance mixes a conditioned and an unconditioned row (the text
replaced by zeros), and the logits processors keep only channel 0 able to end, force the other
channels' ends after their delays, and a voice prompt's remaining delayed codes are forced in.
:class:`DiaDecoder` does all of that for every request in flight at once, with per-request state
in device tables indexed by cache slot (no host read, no Python per row); it also undoes the
delay, so the runtime gathers real frames: frame ``t`` is complete at position ``t + 15``.

DAC is not causal: a sample depends on frames on both sides, up to its receptive field
(:func:`receptive_frames`). So a streamed chunk is decoded with that many frames of left context
(``left_context``) and of right context: :class:`DiaDecoder` hands frame ``t`` out once frame
``t + lookahead`` is complete too, carrying those next frames' codes as extra codebooks, and
runs ``lookahead`` positions past the end. :class:`DiaAudio` decodes each chunk with both
contexts (cut at the clip's end), so the chunks are the samples the processor's
``batch_decode`` makes of the whole clip at once.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from omni_core.runtime import SlotCache, sample_rows
from omni_core.speech import ARState, ChunkDecoder, DecoderStage, StepOutput
from transformers import DynamicCache, EncoderDecoderCache

if TYPE_CHECKING:  # pragma: no cover
    from transformers import DacModel, DiaForConditionalGeneration

NEG = float("-inf")


def receptive_frames(config: Any) -> int:
    """Frames on either side that one of DAC's output samples depends on (an upper bound from
    its decoder: a kernel-7 conv at the frame rate; per upsampling block a transposed conv over
    two inputs and residual units of dilations 1, 3, 9; a kernel-7 conv at the sample rate)."""
    frames, rate = 3.0, 1
    for ratio in config.upsampling_ratios:
        frames += 2 / rate
        rate *= ratio
        frames += 3 * (1 + 3 + 9) / rate
    frames += 3 / rate
    return math.ceil(frames) + 1


class _CrossStates:
    """The encoder side of a batch: per-request cross-attention keys/values (computed once in
    ``prepare``) padded to the longest text and stacked (a request's conditioned row, then its
    unconditioned one), and the cache that hands them to the decoder: rebuilt only when the
    batch changes, so a step copies nothing."""

    def __init__(self) -> None:
        self.key: tuple[int, ...] = ()
        self.states: torch.Tensor | None = None
        self.mask: torch.Tensor | None = None
        self.both: EncoderDecoderCache | None = None

    def build(self, states: list[ARState], dtype: torch.dtype, cache: SlotCache) -> None:
        key = tuple(s.data["uid"] for s in states)
        if key == self.key:
            return
        longest = max(int(s.data["encoder"].shape[1]) for s in states)

        def stack(name: str, index: int | None = None) -> torch.Tensor:
            parts = []
            for s in states:
                value = s.data[name] if index is None else s.data[name][index]
                pad = longest - value.shape[-2]
                parts.extend(torch.nn.functional.pad(value, (0, 0, 0, pad)).unbind(0))
            return torch.stack(parts)

        cross = DynamicCache()
        for layer in range(len(states[0].data["cross_keys"])):
            cross.update(stack("cross_keys", layer), stack("cross_values", layer), layer)
        self.both = EncoderDecoderCache(cache, cross)
        for layer in range(len(cross)):
            self.both.is_updated[layer] = True
        self.states = stack("encoder")
        lengths = torch.tensor([int(s.data["encoder"].shape[1]) for s in states for _ in "cu"])
        self.mask = text_mask(lengths.to(self.states.device), longest, dtype)
        self.key = key


def text_mask(lengths: torch.Tensor, keys: int, dtype: torch.dtype) -> torch.Tensor:
    """``[rows, 1, 1, keys]`` additive cross-attention mask: each row sees its text's bytes."""
    allowed = torch.arange(keys, device=lengths.device)[None, :] < lengths[:, None]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=lengths.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None, None]


class DiaDecoder(DecoderStage):
    """The decoder's step on its own slot cache (a request's conditioned row in slot ``2 * slot``,
    its unconditioned one in ``2 * slot + 1``: both in one forward, side by side), the logits
    processors of ``generate()``, sampling, and the undelayed frames of every row."""

    #: Per-request settings and counters, one device table each (indexed by slot).
    COUNTS = ("position", "valid", "force_at", "top_k", "guide_k", "seed")
    RATES = ("temperature", "top_p", "guidance")
    #: The tables a step changes (the rest are written when a request joins).
    STATE = ("position", "history", "countdown", "active", "finished")

    def __init__(
        self, model: DiaForConditionalGeneration, *, slots: int, max_len: int, lookahead: int
    ) -> None:
        config = model.config.decoder_config
        self.model, self.slots, self.lookahead = model, slots, lookahead
        self.channels, self.vocab = config.num_channels, config.vocab_size
        self.eos, self.pad = config.eos_token_id, config.pad_token_id
        device = model.device
        self.delays = torch.tensor(model.config.delay_pattern, device=device)
        self.delay = int(self.delays.max())
        self.window = self.delay + 1 + lookahead
        self.cache = SlotCache(2 * slots, max_len, device)
        self.cross = _CrossStates()
        long = {"dtype": torch.long, "device": device}
        self.tables = {n: torch.zeros(slots, **long) for n in self.COUNTS}
        self.tables.update({n: torch.zeros(slots, device=device) for n in self.RATES})
        #: The delayed codes of the last ``window`` positions (a ring by position), the voice
        #: prompt's codes still to force (pad: free), each channel's end countdown.
        self.tables["history"] = torch.full((slots, self.window, self.channels), self.pad, **long)
        self.tables["forced"] = torch.full((slots, self.delay + 1, self.channels), self.pad, **long)
        self.tables["countdown"] = torch.zeros(slots, self.channels, **long)
        self.tables["active"] = torch.zeros(slots, dtype=torch.bool, device=device)
        self.tables["finished"] = torch.zeros(slots, self.channels, dtype=torch.bool, device=device)
        self._index: tuple[tuple[int, ...], torch.Tensor] = ((), self.delays)
        #: Host facts per slot: does the request sample (else every step of it is an argmax).
        self.sampled = [False] * slots

    def prompt_length(self, state: ARState) -> int:
        return int(state.data["prefix"].shape[0])

    def _slots(self, states: list[ARState]) -> torch.Tensor:
        key = tuple(s.slot for s in states)
        if key != self._index[0]:
            self._index = (key, torch.tensor(key, dtype=torch.long, device=self.delays.device))
        return self._index[1]

    def _forward(self, states: list[ARState], ids: torch.Tensor) -> torch.Tensor:
        """``ids [rows, new, channels]`` -> the last hidden state of each request's conditioned
        and unconditioned rows, side by side: ``[2 * rows, hidden]``."""
        self.cache.bind([2 * s.slot + branch for s in states for branch in (0, 1)], ids.shape[1])
        dtype = self.model.dtype
        self.cross.build(states, dtype, self.cache)
        out = self.model.model.decoder(
            input_ids=ids.repeat_interleave(2, dim=0),
            position_ids=self.cache.position_ids(),
            attention_mask=self.cache.attention_mask(dtype),
            encoder_hidden_states=self.cross.states,
            encoder_attention_mask=self.cross.mask,
            cache=self.cross.both,
            use_cache=True,
        ).last_hidden_state[:, -1]
        self.cache.advance()
        return out

    def _scores(self, hidden: torch.Tensor, t: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """Guidance and the end-of-speech processors of ``generate()`` over rows whose tables
        are ``t``: (``[rows, channels, vocab]`` scores to sample from, new active, countdown)."""
        rows = t["position"].shape[0]
        logits = self.model.logits_dense(hidden).float().view(rows, 2, self.channels, self.vocab)
        cond, uncond = logits[:, 0], logits[:, 1]
        scale = t["guidance"][:, None, None]
        guided = cond + (cond - uncond) * scale
        # DiaClassifierFreeGuidanceLogitsProcessor: the conditioned logits, within the top k of
        # the guided ones (k 0: the guided logits themselves)
        k = t["guide_k"].clamp(min=1, max=self.vocab)
        kth = guided.sort(-1, descending=True).values.gather(
            -1, (k - 1)[:, None, None].expand(rows, self.channels, 1)
        )
        filtered = cond.masked_fill(guided < kth, NEG)
        use_k = (t["guide_k"] > 0)[:, None, None]
        scores = torch.where(use_k, filtered, guided)
        scores = torch.where(scale != 1, scores, cond)
        # DiaEOSChannelFilterLogitsProcessor: only channel 0 ends; its end only if it leads
        scores[:, 1:, self.eos :] = NEG
        scores[:, 0, self.eos + 1 :] = NEG
        ends = scores.argmax(-1) == self.eos
        below = torch.arange(self.vocab, device=scores.device) < self.eos
        scores = scores.masked_fill(ends[..., None] & below, NEG)
        is_eos = torch.arange(self.vocab, device=scores.device) == self.eos
        scores = scores.masked_fill(~ends[..., None] & is_eos, NEG)
        # DiaEOSDelayPatternLogitsProcessor: channel c ends `delay[c]` steps after channel 0
        position = t["position"]
        active = t["active"] | ends[:, 0] | (position == t["force_at"])
        force = active[:, None] & (t["countdown"] == 0)
        forced = torch.full_like(scores, NEG)
        forced[..., self.eos] = 0.0
        scores = torch.where(force[..., None], forced, scores)
        return scores, active, t["countdown"] - active[:, None].long()

    def advance(
        self, hidden: torch.Tensor, t: dict[str, torch.Tensor], sampled: bool
    ) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
        """One step of rows whose tables are ``t`` (pure: no table is written) -> ((frames
        ``[rows, (lookahead + 1) * channels]``, stop, is_audio), the new :data:`STATE`)."""
        rows = t["position"].shape[0]
        scores, active, countdown = self._scores(hidden, t)
        scores = scores.reshape(rows * self.channels, self.vocab)
        position = t["position"]
        channel = torch.arange(self.channels, device=position.device)
        if not sampled:  # a host fact: greedy rows only
            raw = scores.argmax(-1).view(rows, self.channels)
        else:
            raw = sample_rows(
                scores,
                temperature=t["temperature"].repeat_interleave(self.channels),
                top_p=t["top_p"].repeat_interleave(self.channels),
                top_k=t["top_k"].repeat_interleave(self.channels),
                seeds=t["seed"].repeat_interleave(self.channels),
                steps=(position[:, None] * self.channels + channel).reshape(-1),
            ).view(rows, self.channels)
        # finished channels say pad (generate's unfinished sequences); a voice prompt's codes
        # still due are forced in (its delay mask)
        pad = torch.full_like(raw, self.pad)
        tokens = torch.where(t["finished"], pad, raw)
        offset = position - t["valid"]
        row = torch.arange(rows, device=position.device)
        due = t["forced"][row, offset.clamp(0, self.delay)]
        due = torch.where((offset <= self.delay)[:, None], due, pad)
        tokens = torch.where(due != self.pad, due, tokens)
        history = t["history"].index_put((row, position % self.window), tokens)
        # frame t = p - 15 - lookahead and the lookahead frames after it, complete now:
        # channel c's code of frame t + j came at position t + j + d_c
        start = position - (self.window - 1)
        ahead = torch.arange(self.lookahead + 1, device=position.device)
        where = (start[:, None, None] + ahead[None, :, None] + self.delays) % self.window
        frames = history[row[:, None, None], where, channel]
        is_audio = start >= t["valid"]
        stop = is_audio & (frames[:, 0, 0] == self.eos)
        state = {
            "position": position + 1,
            "history": history,
            "countdown": countdown,
            "active": active,
            "finished": t["finished"] | (raw == self.eos),
        }
        return (frames.reshape(rows, -1), stop, is_audio), state

    def _step(self, states: list[ARState], hidden: torch.Tensor) -> StepOutput:
        idx = self._slots(states)
        rows = {name: table[idx] for name, table in self.tables.items()}
        sampled = any(self.sampled[s.slot] for s in states)
        (frames, stop, is_audio), state = self.advance(hidden, rows, sampled)
        for name, value in state.items():
            self.tables[name][idx] = value
        return StepOutput(tokens=frames, stop=stop, is_audio=is_audio)

    def join(self, states: list[ARState]) -> torch.Tensor:
        """Write the tables of the requests joining now (their slots may hold old requests);
        their slot index."""
        idx = self._slots(states)
        for state in states:
            self.cache.reset_slot(2 * state.slot)
            self.cache.reset_slot(2 * state.slot + 1)
            self.sampled[state.slot] = state.data["temperature"] > 0
        for name in (*self.COUNTS, *self.RATES):
            values = [s.data[name] for s in states]
            self.tables[name][idx] = torch.tensor(values, device=idx.device).to(self.tables[name])
        self.tables["history"][idx] = self.pad
        forced = torch.stack([s.data["forced"] for s in states]).to(idx.device)
        self.tables["forced"][idx] = forced
        self.tables["countdown"][idx] = self.delays
        self.tables["active"][idx] = False
        self.tables["finished"][idx] = False
        return idx

    def prefill(self, states: list[ARState], cache: SlotCache) -> StepOutput:
        idx = self.join(states)
        prefix = torch.stack([s.data["prefix"] for s in states]).to(idx.device)
        return self._step(states, self._forward(states, prefix))

    def decode(self, states: list[ARState], last: StepOutput, cache: SlotCache) -> StepOutput:
        idx = self._slots(states)
        previous = (self.tables["position"][idx] - 1) % self.window
        ids = self.tables["history"][idx, previous][:, None]
        return self._step(states, self._forward(states, ids))


class DiaAudio(ChunkDecoder):
    """DAC's decoder over a chunk of frames with ``left_context`` frames before it and the
    lookahead frames after it (each frame's extra codebooks), cut at the clip's end."""

    def __init__(self, dac: DacModel, sample_rate: int, *, channels: int, lookahead: int) -> None:
        self.dac, self.sample_rate = dac, sample_rate
        self.samples_per_frame = int(math.prod(dac.config.upsampling_ratios))
        self.channels, self.lookahead = channels, lookahead
        self.left_context = lookahead
        self.end = dac.config.codebook_size  # the first id that is no code (Dia's end, pad)

    def _decode(self, codes: torch.Tensor) -> torch.Tensor:
        audio: Any = self.dac.decode(audio_codes=codes.to(self.dac.device)).audio_values
        return audio.reshape(codes.shape[0], -1).float()

    def decode(self, codes: torch.Tensor, context: int) -> torch.Tensor:
        rows, _, frames = codes.shape
        later = codes[:, self.channels :, -1].reshape(rows, self.lookahead, self.channels)
        clip = torch.cat([codes[:, : self.channels], later.transpose(1, 2)], dim=-1)
        keep = slice(context * self.samples_per_frame, frames * self.samples_per_frame)
        ended = clip[:, 0] >= self.end
        full = clip.shape[-1]
        # the one host read of a chunk: where each clip ends in it (DAC is not causal: a clip
        # that ends is decoded up to its end alone)
        lengths = torch.where(ended.any(-1), ended.int().argmax(-1), full).tolist()
        if all(n == full for n in lengths):
            return self._decode(clip)[:, keep]
        return torch.cat(
            [self._decode(clip[r : r + 1, :, :n])[:, keep] for r, n in enumerate(lengths)]
        )
