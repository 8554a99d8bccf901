"""The stage contract: what a plugin writes so that the runtime can drive its model.

An autoregressive speech model is a chain of stages the runtime calls once per step for the
whole batch of requests in flight:

1. a :class:`DecoderStage` (e.g. a transformer over audio codes) with a KV cache the *runtime* owns
   (:class:`~omni_core.runtime.cache.SlotCache`, transformers' ``Cache`` API): ``prefill`` runs the
   prompts of the requests joining (one length per call) into their slots, ``decode`` advances every
   bound row by one frame;
2. any number of :class:`FrameStage` objects (e.g. a code predictor filling the residual
   codebooks of each frame, with its own short cache), applied to the rows of that step;
3. a :class:`ChunkDecoder` (e.g. a neural codec) that turns frames into audio a chunk at a
   time, with left context, as frames arrive.

Each step's output is a :class:`StepOutput`: the frame of codes per row plus a stop flag that
stays on the device; the runtime reads stop flags back only when it hands out a chunk. The last
frame of each request (its final :class:`StepOutput` row) is fed to the next ``decode``.

Per-request data (prompt embeddings, text still to feed, sampling settings) lives in
:attr:`ARState.data`, filled by the pipeline's ``prepare``; the runtime keeps its bookkeeping
(slot, frames made) next to it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.contract.types import GenerationRequest
    from omni_core.runtime.cache import SlotCache


@dataclass
class ARState:
    """One request in the runtime: the pipeline's data plus the runtime's bookkeeping."""

    request: GenerationRequest
    #: Filled by the pipeline's ``prepare``: whatever its stages read per request.
    data: dict[str, Any] = field(default_factory=dict)
    #: Frames this request may make at most (its stop token usually ends it first).
    max_frames: int = 1024
    #: ``[codebooks, frames]`` codes the codec reads as left context before the first frame
    #: (e.g. a cloned voice's reference codes); None: none.
    codec_context: torch.Tensor | None = None
    #: This request's chunks (None: the stages' schedule), e.g. :meth:`ChunkSchedule.whole`
    #: for a request that is not streamed (``request.stream`` is False).
    schedule: ChunkSchedule | None = None
    #: Set by the runtime: the cache slot, and frames made so far (the next frame's index).
    slot: int = -1
    frames: int = 0


@dataclass
class StepOutput:
    """What one step made, one row per request of the batch (all on the device)."""

    #: ``[rows, codebooks]`` integer codes of the frame each row made.
    tokens: torch.Tensor
    #: ``[rows]`` bool: the row made its end token; this frame and later ones are not audio.
    stop: torch.Tensor
    #: ``[rows, hidden]`` what later stages of the chain read (e.g. the decoder's last hidden
    #: state).
    hidden: torch.Tensor | None = None
    #: ``[rows]`` bool: the row's frame is audio (None: every row's is). A model whose steps
    #: also make control tokens (a speech-start or speech-end marker, no audio) says False
    #: for those rows; the runtime drops their frames when it hands a chunk out.
    is_audio: torch.Tensor | None = None

    @staticmethod
    def cat(outputs: list[StepOutput]) -> StepOutput:
        """Rows of several outputs, in order (``hidden`` kept only if every one has it)."""
        import torch

        if len(outputs) == 1:
            return outputs[0]
        hidden = [o.hidden for o in outputs]
        audio = [o.is_audio for o in outputs]
        if any(a is not None for a in audio):  # a missing flag: every row of that output is audio
            pairs = zip(outputs, audio, strict=True)
            audio = [torch.ones_like(o.stop) if a is None else a for o, a in pairs]
        return StepOutput(
            tokens=torch.cat([o.tokens for o in outputs]),
            stop=torch.cat([o.stop for o in outputs]),
            hidden=None if any(h is None for h in hidden) else torch.cat(hidden),  # type: ignore[misc]
            is_audio=None if audio[0] is None else torch.cat(audio),  # type: ignore[arg-type]
        )

    def rows(self, start: int, stop: int) -> StepOutput:
        return StepOutput(
            tokens=self.tokens[start:stop],
            stop=self.stop[start:stop],
            hidden=None if self.hidden is None else self.hidden[start:stop],
            is_audio=None if self.is_audio is None else self.is_audio[start:stop],
        )


class DecoderStage(ABC):
    """The autoregressive stage: a decoder whose KV cache the runtime owns.

    Both calls receive the :class:`~omni_core.runtime.SlotCache` already bound to their
    rows: pass it as the transformers ``Cache`` (``past_key_values=`` / ``cache=``), with
    ``cache.position_ids()`` and ``cache.attention_mask(dtype)``. Never read tensor values back
    to the host in here (no ``.item()``, no ``.tolist()``, no Python ``if`` on a tensor).
    """

    @abstractmethod
    def prefill(self, states: list[ARState], cache: SlotCache) -> StepOutput:
        """Run the prompts of ``states`` (all of one :meth:`prompt_length`; the cache is bound to
        their slots) in one forward; return each one's first frame (a row per state)."""

    @abstractmethod
    def decode(self, states: list[ARState], last: StepOutput, cache: SlotCache) -> StepOutput:
        """Advance every row by one frame; ``last`` holds each row's previous frame (after the
        whole chain) and ``states[i].frames`` is the index of the frame row ``i`` makes now."""

    def prompt_length(self, state: ARState) -> int:
        """Positions the prompt of ``state`` takes in the cache (default: ``data["prompt"]``'s
        first dimension, a ``[T, hidden]`` embedding)."""
        return int(state.data["prompt"].shape[0])


class FrameStage(ABC):
    """A stage applied to the frames of one step, batched over rows (e.g. a code predictor)."""

    @abstractmethod
    def run(self, states: list[ARState], out: StepOutput) -> StepOutput:
        """Complete or transform the frame of every row; same rows in, same rows out."""


class ChunkDecoder(ABC):
    """Frames to audio, a chunk at a time, with left context (e.g. a neural codec)."""

    #: Native sample rate of the audio it makes.
    sample_rate: int = 24000
    #: Audio samples per frame.
    samples_per_frame: int = 1920
    #: Frames of already-decoded context passed before the new ones of each chunk, so a chunk
    #: joins its predecessor seamlessly.
    left_context: int = 0
    #: True when a row's audio does not depend on the other rows of its call (seeded noise per
    #: row, within float rounding), so the runtime batches seeded requests' chunks too; False
    #: (default): a seeded request's chunks are decoded alone, so its file is the same alone
    #: or under load.
    batches_seeded: bool = False

    @abstractmethod
    def decode(self, codes: torch.Tensor, context: int) -> torch.Tensor:
        """``codes [rows, codebooks, context + new]`` -> the audio of the ``new`` frames only,
        ``[rows, new * samples_per_frame]`` (float, in [-1, 1]); the first ``context`` frames
        are left context (already handed out, or a reference voice's codes)."""


@dataclass(frozen=True)
class ChunkSchedule:
    """How many frames the runtime gathers before it decodes and hands out a chunk.

    A small first chunk makes the first audio early; later chunks are larger so the codec runs
    (and the host synchronises) less often.
    """

    first: int = 4
    rest: int = 12
    #: While a chunk is not due, stop flags are still read every ``check`` frames (with the
    #: other reads of that step), so a request whose chunks are long (a whole answer decoded at
    #: once) ends soon after its stop token instead of at ``max_frames``.
    check: int = 16
    #: Chunks are handed out only on runtime steps that are a multiple of ``gather`` (a due
    #: chunk waits for the next one; a request at its last frame waits unstepped), so requests
    #: that started a few steps apart share one codec call instead of one each; their chunk
    #: boundaries stay their own (``first``, then ``rest``). 1: as soon as a chunk is due. Worth
    #: it where a codec call costs about as much for many rows as for one (launch-bound).
    gather: int = 1

    def __post_init__(self) -> None:
        if self.first < 1 or self.rest < 1 or self.gather < 1:
            raise ValueError(
                f"ChunkSchedule: first, rest and gather must be >= 1 (got {self.first}, "
                f"{self.rest}, {self.gather})"
            )

    def target(self, emitted_chunks: int) -> int:
        return self.first if emitted_chunks == 0 else self.rest

    @classmethod
    def whole(cls, check: int = 16) -> ChunkSchedule:
        """One chunk at the end: the codec decodes the whole answer at once (codecs that are
        not causal give their reference output only so)."""
        return cls(first=1 << 30, rest=1 << 30, check=check)


@dataclass(frozen=True)
class SpeechStages:
    """The chain a pipeline's :meth:`stages` returns."""

    decoder: DecoderStage
    codec: ChunkDecoder
    frame_stages: tuple[FrameStage, ...] = ()
    schedule: ChunkSchedule = ChunkSchedule()
    #: Longest request (prompt + frames) the runtime's cache holds.
    max_len: int = 2048
