"""The autoregressive runtime: step-level continuous batching over a chain of stages.

One :class:`ARRuntime` serves one loaded pipeline. :meth:`ARRuntime.open` queues a prepared
request and returns its :class:`SpeechStream`; each :meth:`ARRuntime.step` then

1. drops streams that were cancelled or ran past their deadline (they leave between steps),
2. runs one ``decode`` of the decoder stage for every request already in flight, batched, and
   the ``prefill`` of the requests that join now (while cache slots are free; one forward per
   prompt length),
3. runs the frame stages over all rows of the step at once,
4. and, for each request whose chunk is due (:class:`~omni_core.runtime.stages.ChunkSchedule`;
   with ``gather`` > 1 only on every ``gather``-th step, so requests a few steps apart share a
   codec call), reads its stop flags back (the only host synchronisation, once per handed-out
   chunk), cuts the frames at the stop and at the request's own chunk boundaries, decodes them
   with left context, one codec call per shape, and hands the audio delta out (a seeded
   request's chunks are decoded alone unless the codec says ``batches_seeded`` and the server
   runs with ``--batch-seeded``: a codec batched with other requests rounds its samples
   differently, so the same seed would not give the same bytes).

Nothing else reads device values: frame counts, cache lengths and chunk boundaries are known on
the host. The engine's worker calls :meth:`step` once per loop iteration, so concurrent requests
share decode steps; without an engine, iterating a stream steps the runtime itself (any number
of threads may do so: steps are serialised by a lock and advance every open stream).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from omni_core.contract.types import AudioChunk
from omni_core.runtime.slots import SlotRuntime, SlotStream
from omni_core.runtime.stages import ARState, SpeechStages, StepOutput

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

    from omni_core.media.dsp import SpeechPostprocessor

log = logging.getLogger("omni.autoregressive")


class SpeechStream(SlotStream[AudioChunk]):
    """One request in an :class:`ARRuntime`: its audio deltas as they are handed out
    (iterate it, or :meth:`poll` it while the engine steps the runtime)."""

    def __init__(
        self,
        runtime: ARRuntime,
        state: ARState,
        post: SpeechPostprocessor | None,
        deadline: float | None,
    ) -> None:
        super().__init__(runtime, state, deadline)
        self.runtime: ARRuntime = runtime
        self.state: ARState = state
        self.post = post
        self.context: torch.Tensor | None = None  # [codebooks, frames] already decoded
        self.codes: list[torch.Tensor] = []  # [codebooks, frames] pieces handed out

    def all_codes(self) -> torch.Tensor:
        """``[codebooks, frames]`` every frame handed out so far (up to the stop)."""
        import torch

        return torch.cat(self.codes, dim=1) if self.codes else torch.zeros(0, 0)

    def _push(self, native: np.ndarray, *, last: bool) -> None:
        import numpy as np

        pieces = [native] if self.post is None else [self.post.process(native)]
        if last and self.post is not None:
            pieces.append(self.post.flush())
        rate = self.post.sample_rate if self.post is not None else self.runtime.sample_rate
        for piece in pieces:
            if piece.size:
                samples = np.ascontiguousarray(piece, dtype=np.float32)
                self.ready.append(AudioChunk(samples=samples, sample_rate=rate))


class ARRuntime(SlotRuntime[SpeechStream]):
    """Serve the :class:`~omni_core.runtime.stages.SpeechStages` of one pipeline (module doc)."""

    prompt_param = "input"

    def __init__(self, stages: SpeechStages, *, max_batch: int = 64, device: Any = "cpu") -> None:
        super().__init__(
            stages.decoder, StepOutput.cat, max_batch=max_batch, max_len=stages.max_len,
            device=device,
        )  # fmt: skip
        self.stages = stages
        self.sample_rate = stages.codec.sample_rate

    def open(
        self,
        state: ARState,
        post: SpeechPostprocessor | None = None,
        *,
        timeout_s: float | None = None,
    ) -> SpeechStream:
        """Queue ``state``; it joins at the next step with a free slot."""
        return self._queue(SpeechStream(self, state, post, self.deadline(timeout_s)))

    def _fit(self, state: ARState, length: int) -> None:
        state.max_frames = min(state.max_frames, self.stages.max_len - length)

    def _joined(self, stream: SpeechStream) -> None:
        left, context = self.stages.codec.left_context, stream.state.codec_context
        if context is not None and left:
            stream.context = context[:, -left:]

    def _released(self, stream: SpeechStream) -> None:
        stream.context = None

    # -- one step ----------------------------------------------------------------------------

    def step(self) -> None:
        """Advance every open stream by one frame (see the module docstring)."""
        import torch

        with self.lock, torch.inference_mode():
            self._drop_expired()
            # a request at its last frame waiting for a gathering step is not stepped again
            held = [s for s in self._active if s.state.frames >= s.state.max_frames]
            stepped = [s for s in self._active if s.state.frames < s.state.max_frames]
            rows, out = self._forward(stepped)
            if not rows:
                if held:  # nobody else steps: nothing to wait for
                    self._hand_out([(s, len(s.pending)) for s in held])
                return
            states = [s.state for s in rows]
            try:
                for stage in self.stages.frame_stages:
                    out = stage.run(states, out)
            except Exception as exc:
                log.exception("frame stage failed for %d requests", len(rows))
                for stream in rows:
                    self._fail(stream, exc)
                return
            self._keep(rows, out)
            for stream in rows:
                stream.state.frames += 1
            due: list[tuple[SpeechStream, int]] = []
            checks: list[SpeechStream] = []
            waiting = set(map(id, held))
            for stream in [*held, *rows]:
                schedule = stream.state.schedule or self.stages.schedule
                # alone, there is nobody to wait for
                gathering = self.steps % schedule.gather == 0 or len(self._active) == 1
                count, target = len(stream.pending), schedule.target(stream.chunks)
                if gathering and stream.state.frames >= stream.state.max_frames:
                    due.append((stream, count))
                elif gathering and count >= target:
                    due.append((stream, count))
                elif count % max(schedule.check, 1) == 0 and id(stream) not in waiting:
                    checks.append(stream)
            if due or checks:
                self._hand_out(due, checks)

    def _hand_out(
        self, due: list[tuple[SpeechStream, int]], checks: list[SpeechStream] | None = None
    ) -> None:
        """Read the stop flags of the due streams' first ``count`` pending frames and of the
        pending frames of the streams ``checks`` names (one sync), then decode and hand out
        the complete chunks among them (and, for a stream that stopped or made its last frame,
        the rest); frames of a chunk not complete yet stay pending."""
        import torch

        checks = checks or []
        read = [*due, *((s, len(s.pending)) for s in checks)]
        rows = [r for s, count in read for r in s.pending[:count]]
        flags = torch.cat([r.stop for r in rows])
        marked = any(r.is_audio is not None for r in rows)
        if marked:  # which frames are audio, read in the same sync as the stop flags
            audio = [torch.ones_like(r.stop) if r.is_audio is None else r.is_audio for r in rows]
            flags = torch.stack([flags, torch.cat(audio)])
        host = flags.to("cpu").tolist()
        host, is_audio = (host[0], host[1]) if marked else (host, None)
        self.syncs += 1
        offset = 0
        checked = set(map(id, checks))
        #: per stream, its pieces in order: (stream, codes or None, ended)
        work: list[list[tuple[SpeechStream, torch.Tensor | None, bool]]] = []
        for stream, count in read:
            mine = host[offset : offset + count]
            audible = None if is_audio is None else is_audio[offset : offset + count]
            offset += count
            if id(stream) in checked and True not in mine:
                continue  # not due and not stopped: its frames wait for their chunk
            keep = mine.index(True) if True in mine else count
            ended = keep < count or (
                count == len(stream.pending) and stream.state.frames >= stream.state.max_frames
            )
            frames = stream.pending[:keep]
            stream.pending = [] if ended else stream.pending[count:]
            work.append(self._pieces(stream, frames, audible, ended))
        # decode round by round (a stream's second piece needs its first piece's context);
        # in a round, one codec call per group of equal shapes (context frames, new frames)
        for round_ in range(max((len(w) for w in work), default=0)):
            groups: dict[tuple[int, int, int], list[tuple[SpeechStream, Any, bool]]] = {}
            for pieces in work:
                if round_ >= len(pieces):
                    continue
                stream, codes, ended = pieces[round_]
                if codes is None:  # nothing audible in it
                    if ended:
                        self._finish(stream, None)
                    continue
                context = 0 if stream.context is None else stream.context.shape[1]
                key = (context, codes.shape[1], self._alone(stream))
                groups.setdefault(key, []).append((stream, codes, ended))
            for (context, _, _), members in groups.items():
                self._decode_audio(context, members)

    def _pieces(
        self,
        stream: SpeechStream,
        frames: list[StepOutput],
        audible: list[bool] | None,
        ended: bool,
    ) -> list[tuple[SpeechStream, torch.Tensor | None, bool]]:
        """``frames`` cut into the stream's own chunks (its schedule's targets, from the
        chunks it has had), so its chunk boundaries do not depend on when they were handed
        out; an incomplete last chunk goes back to pending unless the stream ``ended``."""

        schedule = stream.state.schedule or self.stages.schedule
        pieces: list[tuple[SpeechStream, torch.Tensor | None, bool]] = []
        start = 0
        while len(frames) - start >= schedule.target(stream.chunks + len(pieces)) > 0:
            end = start + schedule.target(stream.chunks + len(pieces))
            pieces.append((stream, self._codes(frames[start:end], audible, start), False))
            start = end
        if not ended:
            stream.pending = frames[start:] + stream.pending
        elif start < len(frames) or not pieces:
            pieces.append((stream, self._codes(frames[start:], audible, start), True))
        else:
            pieces[-1] = (stream, pieces[-1][1], True)
        return pieces

    @staticmethod
    def _codes(
        frames: list[StepOutput], audible: list[bool] | None, start: int
    ) -> torch.Tensor | None:
        """``[codebooks, frames]`` of the audible ``frames`` (None: none; control tokens make
        no audio)."""
        import torch

        if audible is not None:
            flags = audible[start : start + len(frames)]
            frames = [r for r, a in zip(frames, flags, strict=True) if a]
        return torch.cat([r.tokens for r in frames]).T if frames else None

    def _alone(self, stream: SpeechStream) -> int:
        """A seeded request's chunks get a codec call of their own unless the codec says its
        rows do not depend on each other and the server allows ``batch_seeded`` (module
        docstring)."""
        if stream.state.request.seed is None or (
            self.batch_seeded and self.stages.codec.batches_seeded
        ):
            return 0
        return id(stream)

    def _decode_audio(
        self, context: int, members: list[tuple[SpeechStream, torch.Tensor, bool]]
    ) -> None:
        import torch

        codec = self.stages.codec
        inputs = []
        for stream, codes, _ in members:
            full = codes if stream.context is None else torch.cat([stream.context, codes], dim=1)
            inputs.append(full)
            keep = codec.left_context
            stream.context = full[:, full.shape[1] - keep :] if keep else None
            stream.codes.append(codes)
        try:
            audio = codec.decode(torch.stack(inputs), context).float().to("cpu").numpy()
        except Exception as exc:
            log.exception("codec failed for %d requests", len(members))
            for stream, _, _ in members:
                self._fail(stream, exc)
            return
        for row, (stream, _, ended) in enumerate(members):
            stream.chunks += 1
            if ended:
                self._finish(stream, audio[row])
            else:
                stream._push(audio[row], last=False)

    def _finish(self, stream: SpeechStream, audio: np.ndarray | None) -> None:
        import numpy as np

        stream._push(audio if audio is not None else np.zeros(0, np.float32), last=True)
        if stream in self._active:
            self._release(stream)
        stream.finished = True
