"""Token sampling for batched decoders: every row its own settings, reproducible per request.

:func:`sample_tokens` picks one token per row from ``[rows, vocab]`` logits with each row's
:class:`Sampling` (temperature 0 is greedy; top-k, then top-p). The randomness is not drawn
from a shared generator: it is a hash of the row's seed, its step and the token id, computed on
the device. So a seeded request makes the same answer alone or batched with any others, in any
order, and no per-row generator (and no host round trip) is needed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import torch

_MASK = 0xFFFFFFFF


@dataclass(frozen=True)
class Sampling:
    """How one request picks its tokens."""

    #: 0: greedy (argmax).
    temperature: float = 0.0
    top_p: float = 1.0
    #: 0: every token.
    top_k: int = 0
    #: transformers' repetition penalty (1: none); applied by the stage that tracks what a row
    #: has seen (:func:`apply_repetition_penalty`).
    repetition_penalty: float = 1.0
    #: None: a random seed is drawn when the settings are made (:meth:`seeded`).
    seed: int | None = None

    def seeded(self) -> Sampling:
        """These settings with a concrete seed (drawn now when none was given)."""
        if self.seed is not None:
            return self
        return Sampling(
            self.temperature,
            self.top_p,
            self.top_k,
            self.repetition_penalty,
            random.getrandbits(31),
        )


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash on int64 tensors (no overflow: products stay below 2**60)."""
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _MASK
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _MASK
    return (x >> 16) ^ x


def row_uniform(seeds: torch.Tensor, steps: torch.Tensor, vocab: int) -> torch.Tensor:
    """``[rows, vocab]`` uniforms in (0, 1) from (seed, step, token id): the same for a row
    whatever else is in the batch."""
    import torch

    ids = torch.arange(vocab, device=seeds.device, dtype=torch.long)
    base = _mix((seeds & _MASK) ^ _mix((steps * 0x9E3779B1) & _MASK))
    x = _mix(base.unsqueeze(1) ^ ids.unsqueeze(0))
    return (x.to(torch.float64) + 0.5) / float(1 << 32)


def sample_tokens(
    logits: torch.Tensor, samplings: list[Sampling], steps: list[int]
) -> torch.Tensor:
    """``[rows]`` token ids: row ``i`` sampled with ``samplings[i]`` at step ``steps[i]``."""
    import torch

    if all(s.temperature <= 0 for s in samplings):
        return logits.argmax(dim=-1)
    device = logits.device
    return sample_rows(
        logits,
        temperature=torch.tensor([s.temperature for s in samplings], device=device),
        top_p=torch.tensor([s.top_p for s in samplings], device=device),
        top_k=torch.tensor([s.top_k for s in samplings], device=device),
        seeds=torch.tensor([s.seeded().seed or 0 for s in samplings], device=device),
        steps=torch.tensor(steps, device=device),
    )


def sample_rows(
    logits: torch.Tensor,
    *,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    top_k: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
) -> torch.Tensor:
    """:func:`sample_tokens` with every setting a ``[rows]`` device tensor (``top_k`` 0: every
    token; ``temperature`` 0: greedy): no host value is read, so a captured CUDA graph can run
    it with settings that change between replays. The same tokens as :func:`sample_tokens`."""
    import torch

    device, vocab = logits.device, logits.shape[-1]
    greedy = logits.argmax(dim=-1)
    temps = temperature.float().clamp(min=1e-5)
    top_k = torch.where(top_k > 0, top_k, vocab)
    scaled = logits.float() / temps.unsqueeze(1)
    ordered, order = scaled.sort(dim=-1, descending=True)
    rank = torch.arange(vocab, device=device).unsqueeze(0)
    ordered = ordered.masked_fill(rank >= top_k.unsqueeze(1), float("-inf"))
    probs = ordered.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # mass of the tokens ranked above
    probs = probs.masked_fill((before > top_p.unsqueeze(1)) & (rank > 0), 0.0)
    # exponential race: argmax p / E with E ~ Exp(1), the noise keyed by token id
    noise = row_uniform(seeds, steps, vocab).gather(1, order)
    race = probs.double() / (-torch.log(noise))
    picked = order.gather(1, race.argmax(dim=-1, keepdim=True)).squeeze(1)
    return torch.where(temperature <= 0, greedy, picked)


def apply_repetition_penalty(
    logits: torch.Tensor, seen: torch.Tensor, penalties: torch.Tensor
) -> torch.Tensor:
    """transformers' repetition penalty per row: tokens ``seen[rows, vocab]`` get their logit
    divided by the row's penalty (multiplied when negative)."""
    import torch

    p = penalties.to(logits.dtype).unsqueeze(1)
    penalised = torch.where(logits < 0, logits * p, logits / p)
    return torch.where(seen, penalised, logits)
