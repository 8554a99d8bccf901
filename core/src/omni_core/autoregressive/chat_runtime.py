"""The chat runtime: step-level continuous batching of a thinker, with its talker in tow.

One :class:`ChatRuntime` serves one loaded chat pipeline
(:mod:`omni_core.autoregressive.text` has the stage contract). :meth:`ChatRuntime.open` queues
a prepared request and returns its :class:`ChatStream`; each :meth:`ChatRuntime.step` then

1. drops streams that were cancelled or ran past their deadline (between steps),
2. runs one thinker ``decode`` for every answer still being written, batched, and the
   ``prefill`` of the requests that join now (while slots are free; one forward per prompt
   length), and writes each row's ``follow`` into the :class:`ReplyBuffer` (device only),
3. for each answer whose text chunk is due (:class:`~omni_core.autoregressive.ChunkSchedule`),
   reads its token ids and stop flags back (one host synchronisation for all due rows), cuts
   at the stop token or ``max_tokens`` and hands out the new text,
4. lets the requests that asked for audio join the talker (an
   :class:`~omni_core.autoregressive.ARRuntime` over the follower's speech stages) once they
   have :attr:`~omni_core.autoregressive.SpeechFollower.lead` tokens, steps the talker once,
   and hands out the audio it decoded.

A request's cache slot (and its row of the reply buffer) is held until its audio is done too,
so the talker can read what the thinker wrote after the text has ended. Without an engine,
iterating a stream steps the runtime itself (steps are serialised by a lock).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from omni_core.autoregressive.text import ReplyBuffer, TextStages, TextState, TokenOutput
from omni_core.chat.types import ChatDelta, ChatUsage

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.autoregressive.runtime import ARRuntime, SpeechStream

log = logging.getLogger("omni.autoregressive")


class ChatStream(Iterator[ChatDelta]):
    """One answer in a :class:`ChatRuntime`: its text and audio deltas as they are handed out.

    Iterating it steps the runtime until the next delta is ready (the single-request path);
    the engine instead steps the runtime itself and takes ready deltas with :meth:`poll`.
    """

    def __init__(self, runtime: ChatRuntime, state: TextState, deadline: float | None) -> None:
        self.runtime, self.state, self.deadline = runtime, state, deadline
        self.ready: collections.deque[ChatDelta] = collections.deque()
        self.finished = False
        self.error: BaseException | None = None
        self._cancel: str | None = None
        # the runtime's bookkeeping
        self.last: TokenOutput | None = None
        self.pending: list[TokenOutput] = []
        self.ids: list[int] = []
        self.text = ""
        self.chunks = 0
        self.text_done = False
        self.finish_reason: str | None = None
        self.speech: SpeechStream | None = None

    # -- what consumers use ------------------------------------------------------------------

    def poll(self) -> list[ChatDelta]:
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
        """Leave the runtime now (between steps); its slot is freed."""
        self.runtime.close(self)

    def __iter__(self) -> ChatStream:
        return self

    def __next__(self) -> ChatDelta:
        while True:
            if self.ready:
                return self.ready.popleft()
            if self.error is not None:
                raise self.error
            if self.finished:
                raise StopIteration
            self.runtime.step()

    @property
    def audio_pending(self) -> bool:
        return self.state.with_audio and not (self.speech is not None and self.speech.finished)


class ChatRuntime:
    """Serve the :class:`~omni_core.autoregressive.TextStages` of one pipeline (module doc)."""

    def __init__(self, stages: TextStages, *, max_batch: int = 64, device: Any = "cpu") -> None:
        from omni_core.autoregressive.cache import SlotCache

        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.stages = stages
        self.max_batch = max_batch
        self.cache = SlotCache(max_batch, stages.max_len, device)
        self.reply: ReplyBuffer | None = None
        self.talker: ARRuntime | None = None
        self.sample_rate: int | None = None
        if stages.speech is not None:
            from omni_core.autoregressive.runtime import ARRuntime

            self.reply = ReplyBuffer(max_batch, stages.max_len, device)
            self.talker = ARRuntime(
                stages.speech.stages(self.reply), max_batch=max_batch, device=device
            )
            self.sample_rate = self.talker.sample_rate
        self.lock = threading.RLock()
        self._waiting: collections.deque[ChatStream] = collections.deque()
        self._active: list[ChatStream] = []
        self._free = list(range(max_batch))
        #: Thinker steps run, rows they carried, host synchronisations (tests read them).
        self.steps = 0
        self.rows = 0
        self.syncs = 0

    # -- joining and leaving -----------------------------------------------------------------

    def open(self, state: TextState, *, timeout_s: float | None = None) -> ChatStream:
        """Queue ``state``; it joins at the next step with a free slot."""
        from omni_core.errors import InvalidRequestError

        if state.with_audio and self.talker is None:
            raise InvalidRequestError(
                "modalities: this model was loaded without its talker; it answers text only",
                param="modalities",
            )
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        stream = ChatStream(self, state, deadline)
        with self.lock:
            self._waiting.append(stream)
        return stream

    def close(self, stream: ChatStream) -> None:
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

    def _release(self, stream: ChatStream) -> None:
        self._active.remove(stream)
        self._free.append(stream.state.slot)
        self._free.sort()
        if stream.speech is not None and not stream.speech.done:
            stream.speech.close()
        stream.pending, stream.last = [], None

    def _fail(self, stream: ChatStream, exc: BaseException) -> None:
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
        """Advance every open answer by one token (and its talker by one frame)."""
        import torch

        with self.lock, torch.inference_mode():
            self._drop_expired()
            self._think()
            if self.talker is not None:
                self._speak()
            for stream in [s for s in self._active if s.text_done and not s.audio_pending]:
                self._finish(stream)

    def _think(self) -> None:
        rows: list[ChatStream] = []
        outputs: list[TokenOutput] = []
        writing = [s for s in self._active if not s.text_done]
        if writing:
            try:
                outputs.append(self._decode(writing))
                rows.extend(writing)
            except Exception as exc:
                log.exception("decode step failed for %d requests", len(writing))
                for stream in writing:
                    self._fail(stream, exc)
        for group in self._joining():
            out = self._prefill(group)
            if out is not None:
                outputs.append(out)
                rows.extend(group)
        if not rows:
            return
        out = TokenOutput.cat(outputs)
        states = [s.state for s in rows]
        if self.reply is not None:
            self.reply.write([s.slot for s in states], [s.tokens for s in states], out)
        self.steps += 1
        self.rows += len(rows)
        due = []
        for i, stream in enumerate(rows):
            row = out.rows(i, i + 1)
            stream.last = row
            stream.pending.append(row)
            stream.state.tokens += 1
            full = stream.state.tokens >= stream.state.max_tokens
            if full and self.reply is not None:
                self.reply.end(stream.state.slot, stream.state.tokens)
            if full or len(stream.pending) >= self.stages.schedule.target(stream.chunks):
                due.append(stream)
        if due:
            self._hand_out_text(due)

    def _decode(self, batch: list[ChatStream]) -> TokenOutput:
        cache = self.cache
        cache.bind([s.state.slot for s in batch], 1)
        last = TokenOutput.cat([s.last for s in batch if s.last is not None])
        out = self.stages.decoder.decode([s.state for s in batch], last, cache)
        cache.advance()
        return out

    def _joining(self) -> list[list[ChatStream]]:
        """Waiting streams that join now (while slots are free), grouped by prompt length."""
        from omni_core.errors import InvalidRequestError

        groups: dict[int, list[ChatStream]] = {}
        while self._waiting and len(self._free) > sum(len(g) for g in groups.values()):
            stream = self._waiting.popleft()
            state = stream.state
            try:
                length = self.stages.decoder.prompt_length(state)
                if length >= self.stages.max_len:
                    raise InvalidRequestError(
                        f"messages: the prompt takes {length} tokens; this model holds "
                        f"{self.stages.max_len}",
                        param="messages",
                    )
            except Exception as exc:  # noqa: BLE001 - this request fails alone
                self._fail(stream, exc)
                continue
            state.prompt_tokens = state.prompt_tokens or length
            state.max_tokens = min(state.max_tokens, self.stages.max_len - length)
            groups.setdefault(length, []).append(stream)
        return list(groups.values())

    def _prefill(self, group: list[ChatStream]) -> TokenOutput | None:
        length = self.stages.decoder.prompt_length(group[0].state)
        for stream in group:
            stream.state.slot = self._free.pop(0)
            self._active.append(stream)
            self.cache.reset_slot(stream.state.slot)
            if self.reply is not None:
                self.reply.reset(stream.state.slot)
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

    def _hand_out_text(self, due: list[ChatStream]) -> None:
        """Read the due rows' tokens and stop flags (one sync), hand out their new text."""
        import torch

        tokens = torch.cat([torch.cat([r.tokens.view(-1) for r in s.pending]) for s in due])
        flags = torch.cat([torch.cat([r.stop.view(-1) for r in s.pending]) for s in due])
        host_tokens, host_flags = torch.stack([tokens, flags.to(tokens.dtype)]).to("cpu").tolist()
        self.syncs += 1
        offset = 0
        for stream in due:
            count = len(stream.pending)
            mine, stops = host_tokens[offset : offset + count], host_flags[offset : offset + count]
            offset += count
            stream.pending = []
            keep = stops.index(1) if 1 in stops else count
            stream.ids.extend(int(t) for t in mine[:keep])
            stream.chunks += 1
            if keep < count:
                stream.text_done, stream.finish_reason = True, "stop"
            elif stream.state.tokens >= stream.state.max_tokens:
                stream.text_done, stream.finish_reason = True, "length"
            self._push_text(stream)

    def _push_text(self, stream: ChatStream) -> None:
        text = self.stages.detokenize(stream.ids)
        if not stream.text_done:  # an unfinished multi-byte character waits for its rest
            text = text.rstrip("\ufffd")
        if text.startswith(stream.text) and len(text) > len(stream.text):
            stream.ready.append(ChatDelta(text=text[len(stream.text) :]))
            stream.text = text
        elif not text.startswith(stream.text):  # detokenization changed earlier text: resend
            log.debug("request %s: detokenized text changed", stream.state.request.request_id)

    def _speak(self) -> None:
        from omni_core.audio.dsp import SpeechPostprocessor
        from omni_core.pipelines.base import AudioChunk

        assert self.talker is not None and self.stages.speech is not None
        lead = self.stages.speech.lead
        for stream in self._active:
            state = stream.state
            if not state.with_audio or stream.speech is not None:
                continue
            if state.tokens < lead and not stream.text_done:
                continue
            try:
                talker_state = self.stages.speech.prepare(state)
            except Exception as exc:
                log.exception("request %s: talker prepare failed", state.request.request_id)
                self._fail(stream, exc)
                continue
            post = SpeechPostprocessor(
                self.talker.sample_rate, sample_rate=state.request.sample_rate, speed=1.0
            )
            remaining = None if stream.deadline is None else stream.deadline - time.monotonic()
            stream.speech = self.talker.open(talker_state, post, timeout_s=remaining)
        if self.talker.open_streams:
            self.talker.step()
        for stream in list(self._active):
            speech = stream.speech
            if speech is None:
                continue
            for chunk in speech.poll():
                stream.ready.append(ChatDelta(audio=AudioChunk(chunk.samples, chunk.sample_rate)))
            if speech.error is not None and stream in self._active:
                self._fail(stream, speech.error)

    def _finish(self, stream: ChatStream) -> None:
        usage = ChatUsage(
            prompt_tokens=stream.state.prompt_tokens, completion_tokens=len(stream.ids)
        )
        reason = "length" if stream.finish_reason == "length" else "stop"
        stream.ready.append(ChatDelta(finish_reason=reason, usage=usage))  # type: ignore[arg-type]
        if stream in self._active:
            self._release(stream)
        stream.finished = True
