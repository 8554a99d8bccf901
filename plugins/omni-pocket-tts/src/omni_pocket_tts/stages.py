"""Pocket TTS's step as omni stages: the backbone and its flow head, then the codec.

One step of transformers' ``PocketTTSForConditionalGeneration.generate()`` makes one continuous
latent: the backbone reads the previous latent (the learnt BOS latent at the prompt's last
position), its last hidden state gives the end-of-speech logit (``eos_head``) and conditions the
flow head, which integrates Gaussian noise (scaled by ``sqrt(temperature)``, zero when greedy)
to the next latent (``sample_latent``). ``PocketTTSEosThresholdCriteria`` ends a clip
``frames_after_eos`` frames after the first logit above ``eos_threshold`` (from frame
``min_frames_before_eos`` on), those frames kept. :class:`PocketDecoder` does all of that for
every request in flight at once, with per-request settings and counters in device tables
indexed by cache slot and each request's noise drawn up front into a table of its own (no host
read, no Python per row).

The codec's decoder is causal, its transformer attends over a sliding window: a sample depends
on a bounded number of frames before it (:func:`context_frames`). :class:`PocketAudio` decodes
each streamed chunk after that many frames of left context, so the chunks are the samples the
processor's ``decode`` makes of the whole clip (and its fade-in opens the first one).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from omni_core.runtime import SlotCache
from omni_core.speech import ARState, ChunkDecoder, DecoderStage, StepOutput

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PocketTTSAudioTokenizerModel, PocketTTSForConditionalGeneration


def context_frames(config: Any, max_frames: int) -> int:
    """Frames before a codec output sample that it depends on (an upper bound from the decoder:
    the transposed conv that upsamples the latents reads one frame back; the transformer's
    layers each see ``sliding_window`` positions back; the SEANet decoder's causal convs add
    their kernels at each rate). ``max_frames`` when the transformer attends without a window."""
    window = getattr(config, "sliding_window", None)
    if not window:
        return max_frames
    per_frame = config.latent_stride if config.frame_rate != config.encodec_frame_rate else 1
    positions = config.num_hidden_layers * window + (config.kernel_size - 1)
    rate = 1
    for ratio in config.upsampling_ratios:
        positions += 1 / rate
        rate *= ratio
        dilations = sum(config.dilation_growth_rate**j for j in range(config.num_residual_layers))
        positions += (config.residual_kernel_size - 1) * dilations / rate
    positions += (config.last_kernel_size - 1) / rate
    return min(max_frames, math.ceil(positions / per_frame) + 2)


class PocketDecoder(DecoderStage):
    """The backbone's step on the runtime's slot cache, the end-of-speech rule and the flow
    head's latent of every row (``tokens``: the latent in the codec's space; ``hidden``: the
    normalised one, the next step's input)."""

    #: Per-request settings and counters, one device table each (indexed by slot).
    COUNTS = ("frame", "remaining", "frames_after_eos", "min_frames_before_eos")
    RATES = ("eos_threshold", "noise_scale")

    def __init__(
        self, model: PocketTTSForConditionalGeneration, *, slots: int, max_len: int
    ) -> None:
        self.model = model
        config = model.config
        self.latent_token = config.audio_latent_token_id
        self.max_len, self.dim = max_len, config.latent_dim
        device = model.device
        long = {"dtype": torch.long, "device": device}
        self.tables = {n: torch.zeros(slots, **long) for n in self.COUNTS}
        self.tables.update({n: torch.zeros(slots, device=device) for n in self.RATES})
        self.done = torch.zeros(slots, dtype=torch.bool, device=device)
        #: Each request's noise, drawn when it starts (``ARState.data["noise"]``), by frame.
        self.noise = torch.zeros(slots, max_len, self.dim, dtype=model.dtype, device=device)
        self._index: tuple[tuple[int, ...], torch.Tensor] = ((), torch.zeros(0, **long))
        self._groups: tuple[tuple[int, ...], list[tuple[int, torch.Tensor | None]]] = ((), [])

    def prompt_length(self, state: ARState) -> int:
        return int(state.data["input_ids"].shape[-1])

    def _slots(self, states: list[ARState]) -> torch.Tensor:
        key = tuple(s.slot for s in states)
        if key != self._index[0]:
            device = self.done.device
            self._index = (key, torch.tensor(key, dtype=torch.long, device=device))
        return self._index[1]

    def _flow_groups(self, states: list[ARState]) -> list[tuple[int, torch.Tensor | None]]:
        """(flow steps, its rows or None: every row) per number of flow steps in the batch
        (host facts of the requests, rebuilt only when the batch changes)."""
        key = tuple(s.data["uid"] for s in states)
        if key != self._groups[0]:
            steps: dict[int, list[int]] = {}
            for row, state in enumerate(states):
                steps.setdefault(int(state.data["num_flow_steps"]), []).append(row)
            device = self.done.device
            groups: list[tuple[int, torch.Tensor | None]] = [
                (n, None if len(steps) == 1 else torch.tensor(rows, device=device))
                for n, rows in steps.items()
            ]
            self._groups = (key, groups)
        return self._groups[1]

    def _backbone(self, cache: SlotCache, **inputs: Any) -> torch.Tensor:
        return self.model.model(
            **inputs,
            attention_mask=cache.attention_mask(self.model.dtype),
            position_ids=cache.position_ids(),
            cache=cache,
            use_cache=True,
        ).last_hidden_state[:, -1]

    def _step(self, states: list[ARState], hidden: torch.Tensor) -> StepOutput:
        """The end-of-speech rule and the next latent of every row from its hidden state."""
        idx = self._slots(states)
        tables = self.tables
        eos = self.model.eos_head(hidden)[:, 0].float()
        frame = tables["frame"][idx]
        noise = self.noise[idx, frame.clamp(max=self.max_len - 1)]
        noise = (noise.float() * tables["noise_scale"][idx][:, None]).to(hidden.dtype)
        latent = torch.empty_like(noise)
        for steps, rows in self._flow_groups(states):
            if rows is None:
                latent = self.model.sample_latent(hidden, noise, steps)
            else:
                latent[rows] = self.model.sample_latent(hidden[rows], noise[rows], steps)
        # PocketTTSEosThresholdCriteria, per row: a countdown of frames_after_eos frames starts
        # at the first logit above the threshold (from min_frames_before_eos on); the frame
        # where it is out is the last one kept, so the row stops at the next frame
        remaining = tables["remaining"][idx]
        can_end = frame >= tables["min_frames_before_eos"][idx]
        ended = (remaining < 0) & (eos > tables["eos_threshold"][idx]) & can_end
        remaining = torch.where(ended, tables["frames_after_eos"][idx], remaining)
        stop = self.done[idx]
        self.done[idx] = stop | (remaining == 0)
        tables["remaining"][idx] = torch.where(remaining > 0, remaining - 1, remaining)
        tables["frame"][idx] = frame + 1
        tokens = self.model.denormalize_latents(latent)
        return StepOutput(tokens=tokens, stop=stop, hidden=latent)

    def prefill(self, states: list[ARState], cache: SlotCache) -> StepOutput:
        idx = self._slots(states)
        for name in (*self.COUNTS, *self.RATES):
            values = [s.data[name] for s in states]
            self.tables[name][idx] = torch.tensor(values, device=idx.device).to(self.tables[name])
        self.done[idx] = False
        for state in states:  # a sampled request's noise, drawn when it started
            noise = state.data.get("noise")
            if noise is not None:
                self.noise[state.slot, : noise.shape[0]] = noise.to(self.noise)
        ids = torch.cat([s.data["input_ids"] for s in states]).to(idx.device)
        inputs: dict[str, Any] = {"input_ids": ids}
        voices = [s.data.get("voice") for s in states]
        if any(v is not None for v in voices):
            empty = torch.zeros(0, self.dim)
            rows = [empty if v is None else v for v in voices]
            inputs["audio_prompt_latents"] = torch.nn.utils.rnn.pad_sequence(
                rows, batch_first=True
            ).to(idx.device)
            inputs["audio_prompt_latents_mask"] = torch.nn.utils.rnn.pad_sequence(
                [torch.ones(len(r), dtype=torch.long) for r in rows], batch_first=True
            ).to(idx.device)
        return self._step(states, self._backbone(cache, **inputs))

    def decode(self, states: list[ARState], last: StepOutput, cache: SlotCache) -> StepOutput:
        assert last.hidden is not None  # the previous latent, normalised
        rows = last.hidden.shape[0]
        ids = torch.full((rows, 1), self.latent_token, dtype=torch.long, device=last.hidden.device)
        return self._step(
            states, self._backbone(cache, input_ids=ids, audio_latents=last.hidden[:, None])
        )


class PocketAudio(ChunkDecoder):
    """The codec's decoder over a chunk of latents after ``left_context`` frames of context
    (:func:`context_frames`), the processor's fade-in on the clip's first samples."""

    def __init__(
        self, codec: PocketTTSAudioTokenizerModel, *, fade_in: float, max_len: int
    ) -> None:
        config = codec.config
        self.codec = codec
        self.sample_rate = int(config.sampling_rate)
        self.samples_per_frame = int(config.frame_size)
        self.left_context = context_frames(config, max_len)
        self.fade = torch.linspace(0, 1, int(fade_in * self.sample_rate))

    def decode(self, codes: torch.Tensor, context: int) -> torch.Tensor:
        latents = codes.transpose(1, 2).to(self.codec.device, self.codec.dtype)
        audio: Any = self.codec.decode(latents).audio_values
        frames = codes.shape[-1]
        audio = audio[:, 0, context * self.samples_per_frame : frames * self.samples_per_frame]
        audio = audio.float()
        if context == 0 and self.fade.numel():  # the clip's first chunk
            fade = min(self.fade.numel(), audio.shape[1])
            audio[:, :fade] *= self.fade[:fade].to(audio.device)
        return audio
