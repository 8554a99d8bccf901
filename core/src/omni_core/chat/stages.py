"""The text stage contract: what a plugin writes so the chat runtime can drive a text stage (an
LLM that answers in text) and, optionally, a speech chain that speaks the answer as it is written.

A chat model is a :class:`TextStage` (the model that writes the answer, e.g. an omni model's
thinker: prefill and one decode step for a batch of requests, its KV cache a runtime-owned
:class:`~omni_core.runtime.cache.SlotCache`), a detokenizer, and optionally a
:class:`SpeechFollower`: the speech chain (:class:`~omni_core.speech.SpeechStages`: its decoder,
frame stages, codec) of the requests that asked for audio. The runtime
(:class:`~omni_core.chat.runtime.ChatRuntime`) steps the text stage first and the speech chain
second in every step, so the speech chain reads what the text stage wrote in the same or an earlier
step:

- each text stage step returns a :class:`TokenOutput` per row: the token made, its stop flag (on
  the device), and ``follow``, a ``[rows, hidden]`` tensor the runtime writes into the
  request's row of a :class:`ReplyBuffer` at the index of the token made (what the speech chain
  reads for that token: e.g. the text stage's hidden state plus the token's embedding);
- the buffer also tracks, on the device, the index of each request's stop token
  (:attr:`ReplyBuffer.stop_at`), so the speech chain knows where the text ends without the host
  reading anything;
- a request that wants audio gets its speech chain stream once the text stage has made
  :attr:`SpeechFollower.lead` tokens; the follower's :meth:`~SpeechFollower.prepare` builds its
  :class:`~omni_core.speech.ARState` from the text stage's state (the prefill may leave the speech
  chain's prompt in ``state.data``).

Token ids are read back to the host only when a text chunk is due
(:class:`~omni_core.speech.ChunkSchedule`: the first token at once, then every few).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omni_core.runtime.stages import ChunkSchedule

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.contract.types import GenerationRequest
    from omni_core.runtime.cache import SlotCache
    from omni_core.runtime.stages import ARState, SpeechStages


@dataclass
class TextState:
    """One chat request in the runtime: the pipeline's data plus the runtime's bookkeeping."""

    request: GenerationRequest
    #: Filled by the pipeline's ``prepare`` (prompt embeddings, positions, sampling settings)
    #: and by its stages (e.g. the prefill's hidden states the speech chain's prompt is made of).
    data: dict[str, Any] = field(default_factory=dict)
    #: Tokens the answer may have at most (``max_tokens``).
    max_tokens: int = 512
    #: True when the request asked for audio (and the pipeline has a follower).
    with_audio: bool = False
    #: Tokens of the prompt (reported as ``usage.prompt_tokens``; set by ``prepare``).
    prompt_tokens: int = 0
    #: Set by the runtime: the cache slot (also the request's row of the reply buffer) and
    #: tokens made so far (the index of the token the next step makes).
    slot: int = -1
    tokens: int = 0


@dataclass
class TokenOutput:
    """What one text stage step made, one row per request (all on the device)."""

    #: ``[rows]`` token ids.
    tokens: torch.Tensor
    #: ``[rows]`` bool: the row made its stop token (it ends the answer and is not text).
    stop: torch.Tensor
    #: ``[rows, hidden]`` what the speech chain reads for the token of this step (None: nothing).
    follow: torch.Tensor | None = None
    #: ``follow`` belongs to the token made ``follow_lag`` steps earlier: a text stage whose
    #: speech chain reads the hidden state *at* a token's position (computed by the step that feeds
    #: that token in, i.e. the one making the next token) sets 1. The reply buffer stores it at
    #: that earlier index, and an answer cut by ``max_tokens`` ends ``follow_lag`` earlier
    #: (its last token's entry is never computed).
    follow_lag: int = 0

    @staticmethod
    def cat(outputs: list[TokenOutput]) -> TokenOutput:
        import torch

        if len(outputs) == 1:
            return outputs[0]
        follows = [o.follow for o in outputs]
        return TokenOutput(
            tokens=torch.cat([o.tokens for o in outputs]),
            stop=torch.cat([o.stop for o in outputs]),
            follow=None if any(f is None for f in follows) else torch.cat(follows),  # type: ignore[misc]
            follow_lag=max(o.follow_lag for o in outputs),
        )

    def rows(self, start: int, stop: int) -> TokenOutput:
        return TokenOutput(
            tokens=self.tokens[start:stop],
            stop=self.stop[start:stop],
            follow=None if self.follow is None else self.follow[start:stop],
            follow_lag=self.follow_lag,
        )


class TextStage(ABC):
    """The text stage: a decoder whose KV cache the runtime owns (see
    :class:`~omni_core.speech.DecoderStage` for how to use the bound cache; the same rule holds: no
    device values read back in here)."""

    @abstractmethod
    def prefill(self, states: list[TextState], cache: SlotCache) -> TokenOutput:
        """Run the prompts of ``states`` (all of one :meth:`prompt_length`) in one forward;
        return each one's first token."""

    @abstractmethod
    def decode(self, states: list[TextState], last: TokenOutput, cache: SlotCache) -> TokenOutput:
        """Advance every row by one token; ``last.tokens`` holds each row's previous token and
        ``states[i].tokens`` is the index of the token row ``i`` makes now."""

    def prompt_length(self, state: TextState) -> int:
        """Positions the prompt takes (default: ``data["prompt"]``'s first dimension)."""
        return int(state.data["prompt"].shape[0])


class ReplyBuffer:
    """What the text stage wrote for the speech chain: ``[requests, max_len, hidden]`` on the
    device, one row per chat request (its cache slot), plus the index of each request's stop token.

    The runtime writes; the speech chain's stage reads with :meth:`read`, batched over its rows.
    """

    def __init__(self, rows: int, max_len: int, device: Any) -> None:
        import torch

        self.rows, self.max_len, self.device = rows, max_len, torch.device(device)
        self.values: torch.Tensor | None = None  # allocated at the first write (hidden, dtype)
        #: ``[requests]`` the index of the stop token, ``max_len`` while none was made.
        self.stop_at = torch.full((rows,), max_len, dtype=torch.long, device=self.device)
        #: The text stage's :attr:`TokenOutput.follow_lag` (taken from the first write).
        self.lag = 0

    def reset(self, slot: int) -> None:
        self.stop_at[slot] = self.max_len

    def write(self, slots: list[int], index: list[int], out: TokenOutput) -> None:
        """Store ``out.follow`` at (slot, index) per row and note stop tokens (device only)."""
        import torch

        at = torch.tensor(slots, dtype=torch.long).to(self.device, non_blocking=True)
        pos = torch.tensor(index, dtype=torch.long).to(self.device, non_blocking=True)
        if out.follow is not None:
            self.lag = out.follow_lag
            # a lagging entry lands at the index of its own token (a prefill row's lands at 0,
            # overwritten by the step after it)
            at_value = (pos - self.lag).clamp(min=0)
            if self.values is None:
                self.values = torch.zeros(
                    self.rows,
                    self.max_len,
                    out.follow.shape[-1],
                    dtype=out.follow.dtype,
                    device=self.device,
                )
            self.values[at, at_value] = out.follow.to(self.values.dtype)
        current = self.stop_at[at]
        hit = out.stop.to(self.device) & (pos < current)
        self.stop_at[at] = torch.where(hit, pos, current)

    def end(self, slot: int, index: int) -> None:
        """The answer of ``slot`` ends at ``index`` (``max_tokens`` reached): no device read.
        With a lagging follow it ends ``lag`` earlier (that token's entry is never written)."""
        import torch

        self.stop_at[slot] = torch.minimum(
            self.stop_at[slot], torch.tensor(max(index - self.lag, 0), device=self.device)
        )

    def read(self, slots: list[int], index: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Per row: the value written at (slot, index) (zeros past the stop) and where that
        index is: ``0`` before the stop token, ``1`` the stop token itself, ``2`` past it."""
        import torch

        at = torch.tensor(slots, dtype=torch.long).to(self.device, non_blocking=True)
        pos = torch.tensor(index, dtype=torch.long).to(self.device, non_blocking=True)
        stop = self.stop_at[at]
        where = (pos >= stop).long() + (pos > stop).long()
        if self.values is None:
            raise RuntimeError(
                "the text stage wrote nothing for the speech chain (follow was None)"
            )
        safe = pos.clamp(max=self.max_len - 1)
        values = self.values[at, safe] * (where == 0).unsqueeze(-1).to(self.values.dtype)
        return values, where


class SpeechFollower(ABC):
    """The speech side of a chat model: the speech chain and how a request joins it."""

    #: Text stage tokens a request must have made before its speech chain joins (the speech chain's
    #: prompt and first steps read that many reply entries).
    lead: int = 1

    @abstractmethod
    def stages(self, reply: ReplyBuffer) -> SpeechStages:
        """The speech chain (built once, with the runtime's reply buffer to read from)."""

    @abstractmethod
    def prepare(self, state: TextState) -> ARState:
        """The speech chain's state of a chat request joining it (``state.slot`` is its row of the
        reply buffer; ``state.data`` holds what the text stage's prefill left for the speech
        chain)."""


@dataclass(frozen=True)
class TextStages:
    """The chain a chat pipeline's ``stages`` returns."""

    decoder: TextStage
    #: Token ids of the answer so far -> its text (the runtime streams what is new).
    detokenize: Callable[[list[int]], str]
    #: The speech chain side; None: a text-only model (or one loaded without its speech chain).
    speech: SpeechFollower | None = None
    #: When token ids are read back and text deltas handed out.
    schedule: ChunkSchedule = field(default_factory=lambda: ChunkSchedule(first=1, rest=4))
    #: Longest request (prompt + answer) the text stage's cache holds.
    max_len: int = 4096
