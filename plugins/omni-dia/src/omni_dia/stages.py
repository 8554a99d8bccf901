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
    ``prepare``) padded to the longest text and stacked, rebuilt only when the batch changes."""

    def __init__(self) -> None:
        self.key: tuple[int, ...] = ()
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.states: torch.Tensor | None = None
        self.mask: torch.Tensor | None = None

    def build(self, states: list[ARState], dtype: torch.dtype) -> None:
        key = tuple(s.data["uid"] for s in states)
        if key == self.key:
            return
        longest = max(int(s.data["encoder"].shape[1]) for s in states)

        def stack(name: str, index: int | None = None) -> torch.Tensor:
            parts = []
            for branch in (0, 1):  # conditioned rows first, then the unconditioned ones
                for s in states:
                    value = s.data[name] if index is None else s.data[name][index]
                    value = value[branch]
                    pad = longest - value.shape[-2]
                    parts.append(torch.nn.functional.pad(value, (0, 0, 0, pad)))
            return torch.stack(parts)

        self.layers = [
            (stack("cross_keys", i), stack("cross_values", i))
            for i in range(len(states[0].data["cross_keys"]))
        ]
        self.states = stack("encoder")
        lengths = torch.tensor([int(s.data["encoder"].shape[1]) for s in states] * 2)
        allowed = torch.arange(longest)[None, :] < lengths[:, None]
        mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(
            ~allowed, torch.finfo(dtype).min
        )
        self.mask = mask[:, None, None].to(self.states.device)
        self.key = key

    def cache(self, self_attention: SlotCache) -> EncoderDecoderCache:
        cross = DynamicCache()
        for layer, (k, v) in enumerate(self.layers):
            cross.update(k, v, layer)
        both = EncoderDecoderCache(self_attention, cross)
        for layer in range(len(self.layers)):
            both.is_updated[layer] = True
        return both


class DiaDecoder(DecoderStage):
    """The decoder's step on its own slot cache (a request's conditioned row in slot ``2 * slot``,
    its unconditioned one in ``2 * slot + 1``: both in one forward), the logits processors of
    ``generate()``, sampling, and the undelayed frames of every row."""

    #: Per-request settings and counters, one device table each (indexed by slot).
    COUNTS = ("position", "valid", "force_at", "top_k", "guide_k", "seed")
    RATES = ("temperature", "top_p", "guidance")

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
        self.history = torch.full((slots, self.window, self.channels), self.pad, **long)
        self.forced = torch.full((slots, self.delay + 1, self.channels), self.pad, **long)
        self.countdown = torch.zeros(slots, self.channels, **long)
        self.active = torch.zeros(slots, dtype=torch.bool, device=device)
        self.finished = torch.zeros(slots, self.channels, dtype=torch.bool, device=device)
        self._index: tuple[tuple[int, ...], torch.Tensor] = ((), self.delays)

    def prompt_length(self, state: ARState) -> int:
        return int(state.data["prefix"].shape[0])

    def _slots(self, states: list[ARState]) -> torch.Tensor:
        key = tuple(s.slot for s in states)
        if key != self._index[0]:
            self._index = (key, torch.tensor(key, dtype=torch.long, device=self.delays.device))
        return self._index[1]

    def _forward(self, states: list[ARState], ids: torch.Tensor) -> torch.Tensor:
        """``ids [rows, new, channels]`` -> the last hidden state of the conditioned and the
        unconditioned rows, ``[2 * rows, hidden]``."""
        rows = [s.slot for s in states]
        self.cache.bind([2 * r for r in rows] + [2 * r + 1 for r in rows], ids.shape[1])
        dtype = self.model.dtype
        self.cross.build(states, dtype)
        out = self.model.model.decoder(
            input_ids=torch.cat([ids, ids]),
            position_ids=self.cache.position_ids(),
            attention_mask=self.cache.attention_mask(dtype),
            encoder_hidden_states=self.cross.states,
            encoder_attention_mask=self.cross.mask,
            cache=self.cross.cache(self.cache),
            use_cache=True,
        ).last_hidden_state[:, -1]
        self.cache.advance()
        return out

    def _scores(self, hidden: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Guidance and the end-of-speech processors of ``generate()``: ``[rows, channels,
        vocab]`` scores to sample from."""
        rows = idx.shape[0]
        logits = self.model.logits_dense(hidden).float().view(2 * rows, self.channels, self.vocab)
        cond, uncond = logits[:rows], logits[rows:]
        scale = self.tables["guidance"][idx][:, None, None]
        guided = cond + (cond - uncond) * scale
        # DiaClassifierFreeGuidanceLogitsProcessor: the conditioned logits, within the top k of
        # the guided ones (k 0: the guided logits themselves)
        k = self.tables["guide_k"][idx].clamp(min=1, max=self.vocab)
        kth = guided.sort(-1, descending=True).values.gather(
            -1, (k - 1)[:, None, None].expand(rows, self.channels, 1)
        )
        filtered = cond.masked_fill(guided < kth, NEG)
        use_k = (self.tables["guide_k"][idx] > 0)[:, None, None]
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
        position = self.tables["position"][idx]
        active = self.active[idx] | ends[:, 0] | (position == self.tables["force_at"][idx])
        countdown = self.countdown[idx]
        force = active[:, None] & (countdown == 0)
        forced = torch.full_like(scores, NEG)
        forced[..., self.eos] = 0.0
        scores = torch.where(force[..., None], forced, scores)
        self.active[idx] = active
        self.countdown[idx] = countdown - active[:, None].long()
        return scores

    def _step(self, states: list[ARState], hidden: torch.Tensor) -> StepOutput:
        idx = self._slots(states)
        rows = idx.shape[0]
        scores = self._scores(hidden, idx).reshape(rows * self.channels, self.vocab)
        position = self.tables["position"][idx]
        channel = torch.arange(self.channels, device=idx.device)

        def per_channel(name: str) -> torch.Tensor:
            return self.tables[name][idx].repeat_interleave(self.channels)

        if all(s.data["temperature"] <= 0 for s in states):  # host facts: greedy rows only
            raw = scores.argmax(-1).view(rows, self.channels)
        else:
            raw = sample_rows(
                scores,
                temperature=per_channel("temperature"),
                top_p=per_channel("top_p"),
                top_k=per_channel("top_k"),
                seeds=per_channel("seed"),
                steps=(position[:, None] * self.channels + channel).reshape(-1),
            ).view(rows, self.channels)
        # finished channels say pad (generate's unfinished sequences); a voice prompt's codes
        # still due are forced in (its delay mask)
        finished = self.finished[idx]
        tokens = torch.where(finished, torch.full_like(raw, self.pad), raw)
        self.finished[idx] = finished | (raw == self.eos)
        offset = position - self.tables["valid"][idx]
        due = self.forced[idx, offset.clamp(max=self.delay)]
        due = torch.where((offset <= self.delay)[:, None], due, torch.full_like(due, self.pad))
        tokens = torch.where(due != self.pad, due, tokens)
        ring = position % self.window
        self.history[idx, ring] = tokens
        self.tables["position"][idx] = position + 1
        # frame t = p - 15 - lookahead and the lookahead frames after it, complete now:
        # channel c's code of frame t + j came at position t + j + d_c
        start = position - (self.window - 1)
        ahead = torch.arange(self.lookahead + 1, device=idx.device)
        where = (start[:, None, None] + ahead[None, :, None] + self.delays) % self.window
        frames = self.history[idx[:, None, None], where, channel]
        is_audio = start >= self.tables["valid"][idx]
        stop = is_audio & (frames[:, 0, 0] == self.eos)
        return StepOutput(tokens=frames.reshape(rows, -1), stop=stop, is_audio=is_audio)

    def prefill(self, states: list[ARState], cache: SlotCache) -> StepOutput:
        idx = self._slots(states)
        for state in states:  # the slots may hold old requests
            self.cache.reset_slot(2 * state.slot)
            self.cache.reset_slot(2 * state.slot + 1)
        for name in (*self.COUNTS, *self.RATES):
            values = [s.data[name] for s in states]
            self.tables[name][idx] = torch.tensor(values, device=idx.device).to(self.tables[name])
        self.history[idx] = self.pad
        self.forced[idx] = torch.stack([s.data["forced"] for s in states]).to(idx.device)
        self.countdown[idx] = self.delays
        self.active[idx] = False
        self.finished[idx] = False
        prefix = torch.stack([s.data["prefix"] for s in states]).to(idx.device)
        return self._step(states, self._forward(states, prefix))

    def decode(self, states: list[ARState], last: StepOutput, cache: SlotCache) -> StepOutput:
        idx = self._slots(states)
        previous = (self.tables["position"][idx] - 1) % self.window
        ids = self.history[idx, previous][:, None]
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
        if not bool(ended.any()):  # the one host read of a chunk: does a clip end in it?
            return self._decode(clip)[:, keep]
        lengths = torch.where(ended.any(-1), ended.int().argmax(-1), clip.shape[-1]).tolist()
        return torch.cat(
            [self._decode(clip[r : r + 1, :, :n])[:, keep] for r, n in enumerate(lengths)]
        )
