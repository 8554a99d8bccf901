"""Qwen3-TTS as stages of omni's autoregressive runtime: talker -> code predictor -> codec.

- :class:`TalkerStage` (the decoder stage): the talker transformer on the runtime's slot cache;
  prefill runs a request's prompt embeddings, each decode step feeds every row the embedding of
  its previous frame (16 codebooks) plus its next trailing text row; codebook 0 is picked with
  the official logit processing (repetition penalty, control-token suppression, no early EOS).
- :class:`CodePredictorStage` (a frame stage): codebooks 1..15 of every row's frame, batched.
- :class:`CodecStage` (the chunk decoder): the 12 Hz speech-tokenizer decoder, 25 frames of
  left context (what the official whole-utterance decoding uses between its chunks).

Sampling is per row (each request's own temperature / top-k / top-p, greedy at temperature 0)
and vectorised, so rows with different settings share a step; nothing reads the device back.
Its noise is omni's seeded draw (:func:`omni_core.runtime.row_uniform`), keyed by the request's
seed, the frame, the codebook and the token id: a seeded request speaks the same audio whatever
else shares its steps (a shared generator's draws would depend on the other rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from omni_core.runtime import SlotCache, row_uniform
from omni_core.speech import ARState, ChunkDecoder, DecoderStage, FrameStage, StepOutput

if TYPE_CHECKING:  # pragma: no cover
    from .model import Qwen3TTSModel


@dataclass(frozen=True)
class Sampling:
    """Per-row sampling settings of one batch (``[B]`` tensors); ``any`` is known on the host."""

    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    any: bool
    #: Each row's seed (``[B]`` long): the request's, or one drawn when it named none.
    seed: torch.Tensor

    @classmethod
    def of(cls, states: list[ARState], prefix: str, device: Any) -> Sampling:
        temps = [float(s.data[f"{prefix}temperature"]) for s in states]
        return cls(
            temperature=torch.tensor(temps, device=device),
            top_k=torch.tensor([int(s.data[f"{prefix}top_k"]) for s in states], device=device),
            top_p=torch.tensor([float(s.data[f"{prefix}top_p"]) for s in states], device=device),
            any=any(t > 0 for t in temps),
            seed=torch.tensor([int(s.data["seed"]) for s in states], device=device),
        )


class _BatchSettings:
    """The :class:`Sampling` of the current batch, rebuilt only when the rows change (a small
    upload then; none while the batch stays the same)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._key: tuple[int, ...] = ()
        self._value: Sampling | None = None

    def __call__(self, states: list[ARState]) -> Sampling:
        key = tuple(id(s) for s in states)
        if key != self._key or self._value is None:
            device = states[0].data["made"].device
            self._key, self._value = key, Sampling.of(states, self.prefix, device)
        return self._value


#: Draws per frame in the noise's step counter: codebook 0 (the talker) and 1..15 (predictor).
DRAWS_PER_FRAME = 32


def sample(
    logits: torch.Tensor, settings: Sampling, frame: torch.Tensor, group: int = 0
) -> torch.Tensor:
    """One token per row of ``logits [B, V]`` with each row's settings; temperature 0: argmax.

    ``frame`` (``[B]`` long) is each row's frame index and ``group`` the codebook: with the row's
    seed they key the noise, so a row draws the same token alone or beside any others."""
    greedy = logits.argmax(-1)
    if not settings.any:
        return greedy
    scaled = logits.float() / settings.temperature.clamp(min=1e-5)[:, None]
    ordered, index = scaled.sort(-1, descending=True)
    ranks = torch.arange(ordered.shape[-1], device=ordered.device)[None]
    k = torch.where(settings.top_k > 0, settings.top_k, ordered.shape[-1])
    probs = ordered.softmax(-1)
    keep = (ranks < k[:, None]) & ((probs.cumsum(-1) - probs) < settings.top_p[:, None])
    keep[:, 0] = True
    weights = ordered.masked_fill(~keep, float("-inf")).softmax(-1)
    # the exponential race (argmax of p / Exp(1) noise: a draw from p), the noise keyed by token
    # id and computed on the device, so a CUDA graph can capture it
    steps = frame * DRAWS_PER_FRAME + group
    uniform = row_uniform(settings.seed, steps, ordered.shape[-1]).gather(-1, index)
    race = weights.double() / -torch.log(uniform)
    sampled = index.gather(-1, race.argmax(-1, keepdim=True))[:, 0]
    return torch.where(settings.temperature > 0, sampled, greedy)


def _stack(states: list[ARState], key: str) -> torch.Tensor:
    return torch.stack([s.data[key] for s in states])


class TalkerStage(DecoderStage):
    def __init__(self, model: Qwen3TTSModel) -> None:
        self.model = model
        self.settings = _BatchSettings("")

    def prompt_length(self, state: ARState) -> int:
        return int(state.data["prompt"].embeds.shape[0])

    def _forward(self, embeds: torch.Tensor, cache: SlotCache) -> tuple[torch.Tensor, ...]:
        mask = cache.attention_mask(embeds.dtype)
        hidden, logits = self.model.talker_forward(embeds, cache.position_ids(), mask, cache)
        return hidden[:, -1], logits[:, -1]

    def _pick(
        self, states: list[ARState], hidden: torch.Tensor, logits: torch.Tensor
    ) -> StepOutput:
        model = self.model
        for state in states:  # a joining request starts with no token seen
            if "seen" not in state.data:
                state.data["seen"] = torch.zeros(
                    logits.shape[-1], dtype=torch.bool, device=logits.device
                )
        seen = _stack(states, "seen")
        made = _stack(states, "made")
        # the repetition penalty per row (the official one, row settings may differ)
        penalty = _stack(states, "repetition_penalty")[:, None]
        scores = logits.float()
        penalised = torch.where(scores < 0, scores * penalty, scores / penalty)
        least = _stack(states, "min_new_tokens")[:, None]
        scores = model.codec0_logits(torch.where(seen, penalised, scores), None, made, 1.0, least)
        code0 = sample(scores, self.settings(states), made)
        seen = seen.scatter(1, code0[:, None], True)
        for row, state in enumerate(states):
            state.data["seen"] = seen[row]
            state.data["made"] = made[row] + 1
        stop = code0 == model.codec_eos_id
        return StepOutput(tokens=code0[:, None], stop=stop, hidden=hidden)

    def prefill(self, states: list[ARState], cache: SlotCache) -> StepOutput:
        embeds = torch.stack([s.data["prompt"].embeds for s in states])
        hidden, logits = self._forward(embeds, cache)
        return self._pick(states, hidden, logits)

    def decode(self, states: list[ARState], last: StepOutput, cache: SlotCache) -> StepOutput:
        text = torch.stack([s.data["prompt"].text_for_step(s.frames - 1) for s in states])
        embeds = self.model.frame_embedding(last.tokens, text)[:, None]
        hidden, logits = self._forward(embeds, cache)
        return self._pick(states, hidden, logits)


class CodePredictorStage(FrameStage):
    def __init__(self, model: Qwen3TTSModel) -> None:
        self.model = model
        self.settings = _BatchSettings("sub_")

    def run(self, states: list[ARState], out: StepOutput) -> StepOutput:
        assert out.hidden is not None
        settings = self.settings(states)
        frame = _stack(states, "made") - 1  # the talker counted this frame already

        def sampler(logits: torch.Tensor, group: int) -> torch.Tensor:
            return sample(logits, settings, frame, group)

        codes = self.model.predict_codes(out.hidden, out.tokens[:, 0], sampler=sampler)
        return StepOutput(tokens=codes, stop=out.stop)


class CodecStage(ChunkDecoder):
    left_context = 25

    def __init__(self, model: Qwen3TTSModel) -> None:
        self.model = model
        self.sample_rate = int(model.sample_rate)
        self.samples_per_frame = int(model.samples_per_frame)

    def decode(self, codes: torch.Tensor, context: int) -> torch.Tensor:
        return self.model.codec.decode_chunk(codes, context=context)
