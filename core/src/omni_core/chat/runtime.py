"""The chat runtime: step-level continuous batching of a text stage, with its speech chain in tow.

One :class:`ChatRuntime` serves one loaded chat pipeline (:mod:`omni_core.chat.stages` has the stage
contract). :meth:`ChatRuntime.open` queues a prepared request and returns its :class:`ChatStream`;
each :meth:`ChatRuntime.step` then

1. drops streams that were cancelled or ran past their deadline (between steps),
2. runs one text stage ``decode`` for every answer still being written, batched, and the
   ``prefill`` of the requests that join now (while slots are free; one forward per prompt
   length), and writes each row's ``follow`` into the :class:`ReplyBuffer` (device only),
3. for each answer whose text chunk is due (:class:`~omni_core.speech.ChunkSchedule`), reads its
   token ids and stop flags back (one host synchronisation for all due rows), cuts at the stop token
   or ``max_tokens`` and hands out the new text,
4. lets the requests that asked for audio join the speech chain (an
   :class:`~omni_core.speech.ARRuntime` over the follower's speech stages) once they have
   :attr:`~omni_core.chat.SpeechFollower.lead` tokens, steps the speech chain once, and hands out
   the audio it decoded.

A request's cache slot (and its row of the reply buffer) is held until its audio is done too,
so the speech chain can read what the text stage wrote after the text has ended. Without an engine,
iterating a stream steps the runtime itself (steps are serialised by a lock).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from omni_core.chat.stages import ReplyBuffer, TextStages, TextState, TokenOutput
from omni_core.contract.errors import InvalidRequestError
from omni_core.contract.messages import ChatDelta, ChatUsage
from omni_core.contract.types import AudioChunk
from omni_core.runtime.chain import ARRuntime, SpeechStream
from omni_core.runtime.slots import SlotRuntime, SlotStream

log = logging.getLogger("omni.autoregressive")


class ChatStream(SlotStream[ChatDelta]):
    """One answer in a :class:`ChatRuntime`: its text and audio deltas as they are handed out
    (iterate it, or :meth:`poll` it while the engine steps the runtime)."""

    def __init__(self, runtime: ChatRuntime, state: TextState, deadline: float | None) -> None:
        super().__init__(runtime, state, deadline)
        self.state: TextState = state
        self.ids: list[int] = []
        self.text = ""
        self.text_done = False
        self.finish_reason: str | None = None
        self.speech: SpeechStream | None = None

    @property
    def audio_pending(self) -> bool:
        return self.state.with_audio and not (self.speech is not None and self.speech.finished)


class ChatRuntime(SlotRuntime[ChatStream]):
    """Serve the :class:`~omni_core.chat.TextStages` of one pipeline (module doc)."""

    prompt_param = "messages"

    def __init__(self, stages: TextStages, *, max_batch: int = 64, device: Any = "cpu") -> None:
        super().__init__(
            stages.decoder, TokenOutput.cat, max_batch=max_batch, max_len=stages.max_len,
            device=device,
        )  # fmt: skip
        self.stages = stages
        self.reply: ReplyBuffer | None = None
        self.speech_chain: ARRuntime | None = None
        self.sample_rate: int | None = None
        if stages.speech is not None:
            self.reply = ReplyBuffer(max_batch, stages.max_len, device)
            self.speech_chain = ARRuntime(
                stages.speech.stages(self.reply), max_batch=max_batch, device=device
            )
            self.sample_rate = self.speech_chain.sample_rate

    def open(self, state: TextState, *, timeout_s: float | None = None) -> ChatStream:
        """Queue ``state``; it joins at the next step with a free slot."""
        if state.with_audio and self.speech_chain is None:
            raise InvalidRequestError(
                "modalities: this model was loaded without its speech chain; it answers text only",
                param="modalities",
            )
        return self._queue(ChatStream(self, state, self.deadline(timeout_s)))

    def _fit(self, state: TextState, length: int) -> None:
        state.prompt_tokens = state.prompt_tokens or length
        state.max_tokens = min(state.max_tokens, self.stages.max_len - length)

    def _joined(self, stream: ChatStream) -> None:
        if self.reply is not None:
            self.reply.reset(stream.state.slot)

    def _released(self, stream: ChatStream) -> None:
        if stream.speech is not None and not stream.speech.done:
            stream.speech.close()

    def allow_seeded_batches(self, allow: bool) -> None:
        """The speech chain's codec calls are where seeded answers could share work."""
        super().allow_seeded_batches(allow)
        if self.speech_chain is not None:
            self.speech_chain.allow_seeded_batches(allow)

    # -- one step ----------------------------------------------------------------------------

    def step(self) -> None:
        """Advance every open answer by one token (and its speech chain by one frame)."""
        import torch

        with self.lock, torch.inference_mode():
            self._drop_expired()
            self._write()
            if self.speech_chain is not None:
                self._speak()
            for stream in [s for s in self._active if s.text_done and not s.audio_pending]:
                self._finish(stream)

    def _write(self) -> None:
        rows, out = self._forward([s for s in self._active if not s.text_done])
        if not rows:
            return
        states = [s.state for s in rows]
        if self.reply is not None:
            self.reply.write([s.slot for s in states], [s.tokens for s in states], out)
        self._keep(rows, out)
        due = []
        for stream in rows:
            stream.state.tokens += 1
            full = stream.state.tokens >= stream.state.max_tokens
            if full and self.reply is not None:
                self.reply.end(stream.state.slot, stream.state.tokens)
            if full or len(stream.pending) >= self.stages.schedule.target(stream.chunks):
                due.append(stream)
        if due:
            self._hand_out_text(due)

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
        from omni_core.media.dsp import SpeechPostprocessor

        assert self.speech_chain is not None and self.stages.speech is not None
        lead = self.stages.speech.lead
        for stream in self._active:
            state = stream.state
            if not state.with_audio or stream.speech is not None:
                continue
            if state.tokens < lead and not stream.text_done:
                continue
            try:
                speech_state = self.stages.speech.prepare(state)
            except Exception as exc:
                log.exception("request %s: speech chain prepare failed", state.request.request_id)
                self._fail(stream, exc)
                continue
            post = SpeechPostprocessor(
                self.speech_chain.sample_rate, sample_rate=state.request.sample_rate, speed=1.0
            )
            remaining = None if stream.deadline is None else stream.deadline - time.monotonic()
            stream.speech = self.speech_chain.open(speech_state, post, timeout_s=remaining)
        if self.speech_chain.open_streams:
            self.speech_chain.step()
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
