"""One ``/v1/realtime`` connection: client events in, server events out.

The route (:mod:`omni_core.serving.realtime.route`) reads events and hands each to
:meth:`Connection.handle`; answers run as tasks beside the reader (so audio keeps arriving, and
speech detected meanwhile can cut them off). A bad event is an ``error`` event naming it and
the session goes on; only the session's limits and a bad key end it.
"""

from __future__ import annotations

import asyncio
import base64
import copy
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from omni_core.serving.realtime.events import (
    SAMPLE_RATE,
    EventError,
    apply_update,
    event,
    output_modalities,
)
from omni_core.serving.realtime.respond import Answer, stop
from omni_core.serving.realtime.session import RealtimeSession, decode_b64, pcm16, to_pcm16

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.serving.models import ServedModel
    from omni_core.serving.realtime.vad import ServerVAD
    from omni_core.serving.state import ServerState

Send = Callable[[dict[str, Any]], Awaitable[None]]


class Connection:
    """The session of one socket and the answer it is running, if any."""

    def __init__(self, state: ServerState, served: ServedModel, send: Send) -> None:
        from omni_core.chat.pipeline import ChatPipeline

        pipeline = served.pipeline
        assert isinstance(pipeline, ChatPipeline)  # pick() chose a chat model
        self.state, self.served, self.send = state, served, send
        self.voices = [v.id for v in pipeline.voices()]
        self.speaks = "audio" in pipeline.output_modalities
        self.hears = "audio" in pipeline.input_modalities
        self.reads = ", ".join(pipeline.input_modalities)
        self.session = RealtimeSession(
            served.id, self.voices[0] if self.voices else None, state.config
        )
        settings = self.session.settings
        settings["output_modalities"] = ["audio"] if self.speaks else ["text"]
        if not self.hears:  # nothing to listen to: the client commits nothing either
            settings["audio"]["input"]["turn_detection"] = None
        self.vad: ServerVAD | None = None
        self.answer: Answer | None = None
        self.task: asyncio.Task[None] | None = None
        #: Stream samples appended so far (VAD positions are counted in them).
        self.samples = 0
        #: Where the speech in progress started (a stream sample).
        self.speech_from = 0

    async def start(self) -> None:
        await self.send(event("session.created", session=self.session.settings))

    async def close(self) -> None:
        """The client left: its running answer stops (its engine slot is free at once)."""
        if self.task is not None and self.answer is not None and not self.task.done():
            await stop(self.task, self.answer, None)

    # -- dispatch -----------------------------------------------------------------------------
    async def handle(self, data: dict[str, Any]) -> None:
        kind = data["type"]
        handler = _HANDLERS.get(kind)
        if handler is None:
            raise EventError(f"unknown or unsupported event type {kind!r}", "invalid_event", "type")
        await handler(self, data)

    def _no_ears(self) -> EventError:
        return EventError(
            f"model {self.served.id!r} cannot take audio in (it reads {self.reads}): send text "
            "items (conversation.item.create with input_text)",
            "unsupported_input_modality",
            "audio",
        )

    async def _ensure_vad(self) -> None:
        """The VAD of the session's settings: loaded at the first audio it must listen to,
        reconfigured by ``session.update``, dropped with ``turn_detection: null``."""
        detection = self.session.settings["audio"]["input"]["turn_detection"]
        if detection is None:
            self.vad = None
        elif self.vad is None:
            from omni_core.serving.realtime.vad import ServerVAD

            self.vad = await asyncio.to_thread(ServerVAD, detection)
            self.vad.reset(self.samples)
        else:
            self.vad.configure(detection)

    async def session_update(self, data: dict[str, Any]) -> None:
        updated = apply_update(self.session.settings, data.get("session"), self.voices)
        if updated["audio"]["input"]["turn_detection"] is not None and not self.hears:
            raise self._no_ears()
        if updated["output_modalities"] == ["audio"] and not self.speaks:
            raise EventError(
                f"session.output_modalities: model {self.served.id!r} answers in text only",
                "invalid_value",
                "session.output_modalities",
            )
        self.session.settings = updated
        if self.vad is not None or updated["audio"]["input"]["turn_detection"] is None:
            await self._ensure_vad()
        await self.send(event("session.updated", session=updated))

    # -- input audio --------------------------------------------------------------------------
    async def append(self, data: dict[str, Any]) -> None:
        if not self.hears:
            raise self._no_ears()
        audio = decode_b64(data.get("audio"), "audio")
        if len(audio) % 2:
            raise EventError(
                f"audio: PCM16 has 2 bytes a sample, got {len(audio)} bytes",
                "invalid_value",
                "audio",
            )
        self.session.append(audio)
        await self._ensure_vad()  # its stream position: before this piece
        self.samples += len(audio) // 2
        if self.vad is None:
            return
        for turn in await asyncio.to_thread(self.vad.feed, pcm16(audio)):
            if turn.kind == "start":
                await self._speech_started(turn.sample)
            else:
                await self._speech_stopped(turn.sample)

    def _ms(self, sample: int) -> int:
        return sample * 1000 // SAMPLE_RATE

    async def _speech_started(self, sample: int) -> None:
        detection = self.session.settings["audio"]["input"]["turn_detection"]
        assert self.vad is not None
        origin = self.samples - len(self.session.buffer) // 2  # the buffer's first sample
        # where the committed audio will begin: prefix_padding_ms before the speech (OpenAI's
        # audio_start_ms includes the padding)
        self.speech_from = max(origin, sample - self.vad.padding)
        await self.send(
            event(
                "input_audio_buffer.speech_started",
                audio_start_ms=self._ms(self.speech_from),
                item_id=self.session.pending_item,
            )
        )
        if detection["interrupt_response"] and self.task is not None and not self.task.done():
            assert self.answer is not None
            await stop(self.task, self.answer, "turn_detected")  # barge-in

    async def _speech_stopped(self, sample: int) -> None:
        assert self.vad is not None
        detection = self.session.settings["audio"]["input"]["turn_detection"]
        await self.send(
            event(
                "input_audio_buffer.speech_stopped",
                audio_end_ms=self._ms(sample),
                item_id=self.session.pending_item,
            )
        )
        origin = self.samples - len(self.session.buffer) // 2  # the buffer's first sample
        await self._commit(max(0, self.speech_from - origin) * 2)
        if detection["create_response"]:
            await self._respond({})

    async def commit(self, data: dict[str, Any]) -> None:
        if not self.hears:
            raise self._no_ears()
        await self._commit(0)
        if self.vad is not None:
            self.vad.reset(self.samples)

    async def _commit(self, start: int) -> None:
        previous = self.session.items[-1].id if self.session.items else None
        item = self.session.commit(start)
        await self.send(
            event("input_audio_buffer.committed", previous_item_id=previous, item_id=item.id)
        )
        await self.send(
            event("conversation.item.added", previous_item_id=previous, item=item.shape)
        )
        await self.send(event("conversation.item.done", previous_item_id=previous, item=item.shape))

    async def clear(self, data: dict[str, Any]) -> None:
        self.session.clear()
        if self.vad is not None:
            self.vad.reset(self.samples)
        await self.send(event("input_audio_buffer.cleared"))

    # -- the conversation ---------------------------------------------------------------------
    async def item_create(self, data: dict[str, Any]) -> None:
        item = self.session.item_from_client(data.get("item"))
        if item.audio is not None and not self.hears:
            raise self._no_ears()
        after = data.get("previous_item_id")
        previous = self.session.add(item, after if isinstance(after, str) else None)
        await self.send(
            event("conversation.item.added", previous_item_id=previous, item=item.shape)
        )
        await self.send(event("conversation.item.done", previous_item_id=previous, item=item.shape))

    async def item_delete(self, data: dict[str, Any]) -> None:
        item = self.session.find(data.get("item_id"))
        self.session.items.remove(item)
        await self.send(event("conversation.item.deleted", item_id=item.id))

    async def item_truncate(self, data: dict[str, Any]) -> None:
        """What the client played of an answer (it keeps its transcript: omni cannot tell which
        words the played audio held)."""
        item = self.session.find(data.get("item_id"))
        if item.role != "assistant":
            raise EventError(
                "item_id: only assistant items are truncated", "invalid_value", "item_id"
            )
        ms = data.get("audio_end_ms")
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            raise EventError(
                "audio_end_ms: expected an integer >= 0", "invalid_value", "audio_end_ms"
            )
        item.status = "incomplete"
        await self.send(
            event("conversation.item.truncated", item_id=item.id, content_index=0, audio_end_ms=ms)
        )

    async def item_retrieve(self, data: dict[str, Any]) -> None:
        """The item, with a user turn's audio (base64 PCM16, as OpenAI's retrieve answers)."""
        item = self.session.find(data.get("item_id"))
        shape = copy.deepcopy(item.shape)
        if item.audio is not None:
            for part in shape["content"]:
                if part["type"] == "input_audio":
                    part["audio"] = base64.b64encode(to_pcm16(item.audio)).decode()
                    break
        await self.send(event("conversation.item.retrieved", item=shape))

    # -- answers ------------------------------------------------------------------------------
    async def response_create(self, data: dict[str, Any]) -> None:
        given = data.get("response") or {}
        if not isinstance(given, dict):
            raise EventError("response: expected an object", "invalid_value", "response")
        overrides: dict[str, Any] = {}
        if "output_modalities" in given:
            overrides["output_modalities"] = output_modalities(
                given["output_modalities"], "response.output_modalities"
            )
            if overrides["output_modalities"] == ["audio"] and not self.speaks:
                raise EventError(
                    f"response.output_modalities: model {self.served.id!r} answers in text only",
                    "invalid_value",
                    "response.output_modalities",
                )
        if isinstance(given.get("instructions"), str):
            overrides["instructions"] = given["instructions"]
        for key in ("max_output_tokens", "temperature"):  # checked as session.update checks
            if key in given:
                checked = apply_update(self.session.settings, {key: given[key]}, self.voices)
                overrides[key] = checked[key]
        await self._respond(overrides)

    async def _respond(self, overrides: dict[str, Any]) -> None:
        if self.task is not None and not self.task.done():
            assert self.answer is not None
            raise EventError(
                f"conversation already has an active response in progress: {self.answer.id}",
                "conversation_already_has_active_response",
            )
        if not self.session.items or self.session.items[-1].role != "user":
            raise EventError(
                "the conversation has no user turn to answer: add an item or commit audio first",
                "invalid_value",
                "response",
            )
        self.answer = Answer(self.state, self.served, self.session, self.send, overrides)
        self.task = asyncio.create_task(self.answer.run())

    async def response_cancel(self, data: dict[str, Any]) -> None:
        if self.task is None or self.task.done() or self.answer is None:
            raise EventError(
                "Cancellation failed: no active response found", "response_cancel_not_active"
            )
        await stop(self.task, self.answer, "client_cancelled")


_HANDLERS: dict[str, Callable[[Connection, dict[str, Any]], Awaitable[None]]] = {
    "session.update": Connection.session_update,
    "input_audio_buffer.append": Connection.append,
    "input_audio_buffer.commit": Connection.commit,
    "input_audio_buffer.clear": Connection.clear,
    "conversation.item.create": Connection.item_create,
    "conversation.item.delete": Connection.item_delete,
    "conversation.item.truncate": Connection.item_truncate,
    "conversation.item.retrieve": Connection.item_retrieve,
    "response.create": Connection.response_create,
    "response.cancel": Connection.response_cancel,
}
