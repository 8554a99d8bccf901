"""The autoregressive runtime: step-level continuous batching over a chain of stages.

One :class:`ARRuntime` serves one loaded pipeline. :meth:`ARRuntime.open` queues a prepared
request and returns its :class:`SpeechStream`; each :meth:`ARRuntime.step` then

1. drops streams that were cancelled or ran past their deadline (they leave between steps),
2. runs one ``decode`` of the decoder stage for every request already in flight, batched, and
   the ``prefill`` of the requests that join now (while cache slots are free; one forward per
   prompt length),
3. runs the frame stages over all rows of the step at once,
4. and, for each request whose chunk is due (:class:`~omni_core.autoregressive.ChunkSchedule`),
   reads its stop flags back (the only host synchronisation, once per handed-out chunk), cuts
   the frames at the stop, decodes them with left context and hands the audio delta out.

Nothing else reads device values: frame counts, cache lengths and chunk boundaries are known on
the host. The engine's worker calls :meth:`step` once per loop iteration, so concurrent requests
share decode steps; without an engine, iterating a stream steps the runtime itself (any number
of threads may do so: steps are serialised by a lock and advance every open stream).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from omni_core.autoregressive.stages import ARState, SpeechStages, StepOutput
from omni_core.pipelines.base import AudioChunk

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

    from omni_core.audio.dsp import SpeechPostprocessor

log = logging.getLogger("omni.autoregressive")


class SpeechStream(Iterator[AudioChunk]):
    """One request in an :class:`ARRuntime`: its audio deltas as they are handed out.

    Iterating it steps the runtime until the next delta is ready (the single-request path);
    the engine instead steps the runtime itself and takes ready deltas with :meth:`poll`.
    """

    def __init__(
        self,
        runtime: ARRuntime,
        state: ARState,
        post: SpeechPostprocessor | None,
        deadline: float | None,
    ) -> None:
        self.runtime, self.state, self.post, self.deadline = runtime, state, post, deadline
        self.ready: collections.deque[AudioChunk] = collections.deque()
        self.finished = False
        self.error: BaseException | None = None
        self._cancel: str | None = None
        # the runtime's bookkeeping
        self.last: StepOutput | None = None
        self.pending: list[StepOutput] = []
        self.context: torch.Tensor | None = None  # [codebooks, frames] already decoded
        self.codes: list[torch.Tensor] = []  # [codebooks, frames] pieces handed out
        self.chunks = 0

    # -- what consumers use ------------------------------------------------------------------

    def poll(self) -> list[AudioChunk]:
        """The deltas ready now (never blocks, never steps)."""
        out = list(self.ready)
        self.ready.clear()
        return out

    @property
    def done(self) -> bool:
        return self.finished or self.error is not None

    def cancel(self, reason: str = "cancelled by the client") -> None:
        """Leave at the next step boundary with :class:`~omni_core.engine.RequestCancelledError`."""
        self._cancel = reason

    def close(self) -> None:
        """Leave the runtime now (between steps); its cache slot is freed."""
        self.runtime.close(self)

    def all_codes(self) -> torch.Tensor:
        """``[codebooks, frames]`` every frame handed out so far (up to the stop)."""
        import torch

        return torch.cat(self.codes, dim=1) if self.codes else torch.zeros(0, 0)

    def __iter__(self) -> SpeechStream:
        return self

    def __next__(self) -> AudioChunk:
        while True:
            if self.ready:
                return self.ready.popleft()
            if self.error is not None:
                raise self.error
            if self.finished:
                raise StopIteration
            self.runtime.step()

    # -- what the runtime does ---------------------------------------------------------------

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


class ARRuntime:
    """Serve the :class:`~omni_core.autoregressive.SpeechStages` of one pipeline (module doc)."""

    def __init__(self, stages: SpeechStages, *, max_batch: int = 64, device: Any = "cpu") -> None:
        from omni_core.autoregressive.cache import SlotCache

        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.stages = stages
        self.max_batch = max_batch
        self.sample_rate = stages.codec.sample_rate
        self.cache = SlotCache(max_batch, stages.max_len, device)
        self.lock = threading.RLock()
        self._waiting: collections.deque[SpeechStream] = collections.deque()
        self._active: list[SpeechStream] = []
        self._free = list(range(max_batch))
        #: Steps run and rows they carried (tests and benchmarks read them).
        self.steps = 0
        self.rows = 0
        self.syncs = 0

    # -- joining and leaving -----------------------------------------------------------------

    def open(
        self,
        state: ARState,
        post: SpeechPostprocessor | None = None,
        *,
        timeout_s: float | None = None,
    ) -> SpeechStream:
        """Queue ``state``; it joins at the next step with a free slot."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        stream = SpeechStream(self, state, post, deadline)
        with self.lock:
            self._waiting.append(stream)
        return stream

    def close(self, stream: SpeechStream) -> None:
        with self.lock:
            if stream in self._waiting:
                self._waiting.remove(stream)
            if stream in self._active:
                self._release(stream)
            if not stream.done:
                from omni_core.engine.job import RequestCancelledError

                stream.error = RequestCancelledError("the stream was closed")

    @property
    def open_streams(self) -> int:
        return len(self._waiting) + len(self._active)

    def _release(self, stream: SpeechStream) -> None:
        self._active.remove(stream)
        self._free.append(stream.state.slot)
        self._free.sort()
        stream.pending, stream.last, stream.context = [], None, None

    def _fail(self, stream: SpeechStream, exc: BaseException) -> None:
        if stream in self._active:
            self._release(stream)
        elif stream in self._waiting:
            self._waiting.remove(stream)
        if stream.error is None:
            stream.error = exc

    def _drop_expired(self) -> None:
        from omni_core.engine.job import RequestCancelledError, RequestTimeoutError

        now = time.monotonic()
        for stream in [*self._waiting, *self._active]:
            if stream._cancel is not None:
                self._fail(stream, RequestCancelledError(stream._cancel))
            elif stream.deadline is not None and now > stream.deadline:
                self._fail(stream, RequestTimeoutError("the request ran past its time limit"))

    # -- one step ----------------------------------------------------------------------------

    def step(self) -> None:
        """Advance every open stream by one frame (see the module docstring)."""
        import torch

        with self.lock, torch.inference_mode():
            self._drop_expired()
            rows: list[SpeechStream] = []
            outputs: list[StepOutput] = []
            if self._active:
                batch = list(self._active)
                try:
                    outputs.append(self._decode(batch))
                    rows.extend(batch)
                except Exception as exc:
                    log.exception("decode step failed for %d requests", len(batch))
                    for stream in batch:
                        self._fail(stream, exc)
            for group in self._joining():
                out = self._prefill(group)
                if out is not None:
                    outputs.append(out)
                    rows.extend(group)
            if not rows:
                return
            out = StepOutput.cat(outputs)
            states = [s.state for s in rows]
            try:
                for stage in self.stages.frame_stages:
                    out = stage.run(states, out)
            except Exception as exc:
                log.exception("frame stage failed for %d requests", len(rows))
                for stream in rows:
                    self._fail(stream, exc)
                return
            self.steps += 1
            self.rows += len(rows)
            due, checks = [], []
            for i, stream in enumerate(rows):
                row = out.rows(i, i + 1)
                stream.last = row
                stream.pending.append(row)
                stream.state.frames += 1
                schedule = stream.state.schedule or self.stages.schedule
                target = schedule.target(stream.chunks)
                if len(stream.pending) >= target or stream.state.frames >= stream.state.max_frames:
                    due.append(stream)
                elif len(stream.pending) % max(schedule.check, 1) == 0:
                    checks.append(stream)
            if due or checks:
                self._hand_out(due, checks)

    def _decode(self, batch: list[SpeechStream]) -> StepOutput:
        cache = self.cache
        cache.bind([s.state.slot for s in batch], 1)
        last = StepOutput.cat([s.last for s in batch if s.last is not None])
        out = self.stages.decoder.decode([s.state for s in batch], last, cache)
        cache.advance()
        return out

    def _joining(self) -> list[list[SpeechStream]]:
        """Waiting streams that join now (while slots are free), grouped by prompt length:
        each group is prefilled in one forward. A prompt that cannot fit fails alone."""
        from omni_core.errors import InvalidRequestError

        groups: dict[int, list[SpeechStream]] = {}
        while self._waiting and len(self._free) > sum(len(g) for g in groups.values()):
            stream = self._waiting.popleft()
            state = stream.state
            try:
                length = self.stages.decoder.prompt_length(state)
                if length >= self.stages.max_len:
                    raise InvalidRequestError(
                        f"input: the prompt takes {length} positions; this model holds "
                        f"{self.stages.max_len}",
                        param="input",
                    )
            except Exception as exc:  # noqa: BLE001 - this request fails alone
                self._fail(stream, exc)
                continue
            state.max_frames = min(state.max_frames, self.stages.max_len - length)
            groups.setdefault(length, []).append(stream)
        return list(groups.values())

    def _prefill(self, group: list[SpeechStream]) -> StepOutput | None:
        """Prefill prompts of one length together, each into its own slot."""
        length = self.stages.decoder.prompt_length(group[0].state)
        left = self.stages.codec.left_context
        for stream in group:
            state = stream.state
            if state.codec_context is not None and left:
                stream.context = state.codec_context[:, -left:]
            state.slot = self._free.pop(0)
            self._active.append(stream)
            self.cache.reset_slot(state.slot)
        try:
            self.cache.bind([s.state.slot for s in group], length)
            out = self.stages.decoder.prefill([s.state for s in group], self.cache)
            self.cache.advance()
            return out
        except Exception as exc:  # this group fails, the others go on
            log.exception("prefill failed for %d requests", len(group))
            for stream in group:
                self._fail(stream, exc)
            return None

    def _hand_out(self, due: list[SpeechStream], checks: list[SpeechStream] | None = None) -> None:
        """Read the stop flags of the due chunks and of the streams ``checks`` names (one sync),
        decode and hand out the audio of the due ones and of checked ones that stopped."""
        import torch

        checks = checks or []
        read = [*due, *checks]
        flags = torch.cat([torch.cat([r.stop for r in s.pending]) for s in read])
        host = flags.to("cpu").tolist()
        self.syncs += 1
        offset, work = 0, []
        checked = set(map(id, checks))
        for stream in read:
            count = len(stream.pending)
            mine = host[offset : offset + count]
            offset += count
            if id(stream) in checked and True not in mine:
                continue  # not due and not stopped: its frames wait for their chunk
            keep = mine.index(True) if True in mine else count
            ended = keep < count or stream.state.frames >= stream.state.max_frames
            codes = torch.cat([r.tokens for r in stream.pending[:keep]]).T if keep else None
            stream.pending = []
            work.append((stream, codes, ended))
        # one codec call per group of equal shapes (context frames, new frames)
        groups: dict[tuple[int, int], list[tuple[SpeechStream, torch.Tensor, bool]]] = {}
        for stream, codes, ended in work:
            if codes is None:
                self._finish(stream, None)
                continue
            context = 0 if stream.context is None else stream.context.shape[1]
            groups.setdefault((context, codes.shape[1]), []).append((stream, codes, ended))
        for (context, _), members in groups.items():
            self._decode_audio(context, members)

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
