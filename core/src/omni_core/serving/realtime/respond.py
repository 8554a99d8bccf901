"""One answer of a ``/v1/realtime`` session: the conversation so far goes to the model through
the chat contract (its engine, like ``/v1/chat/completions``), and what it says comes back as the
Realtime API's events: ``response.created``, the assistant item, ``response.output_audio.delta``
(base64 PCM16 at 24 kHz) with ``response.output_audio_transcript.delta`` (or
``response.output_text.delta`` for a text session), their ``.done`` events, ``response.done``
with usage.

A cancelled answer (``response.cancel``, or the speaker talking over it: barge-in) stops at
the engine's next step; what it had said stays in the conversation, marked ``incomplete`` (and
``conversation.item.truncated`` says how much of its audio was sent).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from omni_core.contract.messages import ChatDelta
from omni_core.contract.types import AudioChunk
from omni_core.serving.errors import APIError, from_exception
from omni_core.serving.http import submit_streaming
from omni_core.serving.realtime.events import (
    SAMPLE_RATE,
    assistant_item,
    error_event,
    event,
    new_id,
)
from omni_core.serving.realtime.session import Item, RealtimeSession, to_pcm16

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.serving.models import ServedModel
    from omni_core.serving.state import ServerState

log = logging.getLogger("omni.serving")
Send = Callable[[dict[str, Any]], Awaitable[None]]


class Answer:
    """One response of a session (:meth:`run` is the task the route starts)."""

    def __init__(
        self,
        state: ServerState,
        served: ServedModel,
        session: RealtimeSession,
        send: Send,
        overrides: dict[str, Any],
    ) -> None:
        self.state, self.served, self.session, self.send = state, served, session, send
        settings = session.settings
        self.modalities: list[str] = (
            overrides.get("output_modalities") or settings["output_modalities"]
        )
        self.instructions = overrides.get("instructions")
        self.max_tokens = overrides.get("max_output_tokens", settings["max_output_tokens"])
        self.voice = settings["audio"]["output"]["voice"]
        self.temperature = overrides.get("temperature", settings.get("temperature"))
        self.id = new_id("resp")
        self.item = Item(new_id("item"), "assistant", status="in_progress")
        self.audio_bytes = 0
        #: Why it stopped early: ``turn_detected``, ``client_cancelled``; None: it did not, or
        #: the client left (nothing more is sent).
        self.reason: str | None = None
        self.first_audio_at: float | None = None

    @property
    def spoken(self) -> bool:
        return "audio" in self.modalities

    def shape(self, status: str, output: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "realtime.response",
            "status": status,
            "status_details": None,
            "output": output,
            "conversation_id": "conv_" + self.session.settings["id"][5:],
            "output_modalities": self.modalities,
            "max_output_tokens": self.max_tokens,
            "audio": {
                "output": {
                    "format": self.session.settings["audio"]["output"]["format"],
                    "voice": self.voice,
                }
            },
            "usage": None,
            "metadata": None,
            **extra,
        }

    def item_shape(self) -> dict[str, Any]:
        """The assistant item as it is now (kept on the item: what ``.retrieve`` answers)."""
        self.item.shape = assistant_item(
            self.item.id, self.spoken, self.item.status, self.item.text
        )
        return self.item.shape

    def _request(self) -> Any:
        messages = self.session.messages()
        if self.instructions is not None:  # this answer's own instructions
            from omni_core.contract.messages import ChatMessage

            messages = [m for m in messages if m.role != "system"]
            messages.insert(0, ChatMessage.text("system", self.instructions))
        fields: dict[str, Any] = {
            "messages": messages,
            "modalities": ("text", "audio") if self.spoken else ("text",),
            "voice": self.voice if self.spoken else None,
            "max_tokens": None if self.max_tokens == "inf" else int(self.max_tokens),
            "sample_rate": SAMPLE_RATE if self.spoken else None,
            "temperature": self.temperature,
            "stream": True,
        }
        fields = {k: v for k, v in fields.items() if v is not None}
        return self.state.build_request(self.served, fields, request_id=self.id)

    async def run(self) -> None:
        await self.send(event("response.created", response=self.shape("in_progress", [])))
        job = None
        try:
            gen = self._request()
            job, queue, item = await submit_streaming(self.state, self.served, gen)
            if isinstance(item, Future) and item.exception() is not None:
                raise item.exception()  # type: ignore[misc]
            await self._open()
            while isinstance(item, ChatDelta):
                await self._delta(item)
                item = await queue.get()
            if item.exception() is not None:
                raise item.exception()  # type: ignore[misc]
            usage = item.result().info.get("usage")
            self.item.status = "completed"
            await self._close("completed", None, usage)
        except asyncio.CancelledError:
            if job is not None and self.served.engine is not None and not job.future.done():
                self.served.engine.cancel(job, "the answer was cancelled")
            self.item.status = "incomplete"
            if self.reason is not None:  # cancelled by the client or barge-in: say so
                await self._close("cancelled", self.reason, None, truncated=True)
        except Exception as exc:  # noqa: BLE001 - the answer fails, the session goes on
            if job is not None and self.served.engine is not None and not job.future.done():
                self.served.engine.cancel(job, "the answer failed")
            api = exc if isinstance(exc, APIError) else from_exception(exc)
            log.info("realtime answer %s failed: %s", self.id, api.message)
            self.item.status = "incomplete"
            if self.item in self.session.items and not self.item.text:
                self.session.items.remove(self.item)
            details = {"type": "failed", "error": {"type": api.type, "code": api.code}}
            done = self.shape("failed", [], status_details=details)
            with contextlib.suppress(Exception):  # the client may be what failed
                await self.send(
                    error_event(api.message, api.code or "server_error", api.param, None)
                )
                await self.send(event("response.done", response=done))

    async def _open(self) -> None:
        previous = self.session.add(self.item)
        item = self.item_shape()
        await self.send(event("conversation.item.added", previous_item_id=previous, item=item))
        await self.send(
            event("response.output_item.added", response_id=self.id, output_index=0, item=item)
        )
        part = {"type": "audio", "transcript": ""} if self.spoken else {"type": "text", "text": ""}
        await self.send(event("response.content_part.added", **self._where(), part=part))

    def _where(self) -> dict[str, Any]:
        return {
            "response_id": self.id,
            "item_id": self.item.id,
            "output_index": 0,
            "content_index": 0,
        }

    async def _delta(self, delta: ChatDelta) -> None:
        if delta.text:
            self.item.text += delta.text
            kind = (
                "response.output_audio_transcript.delta"
                if self.spoken
                else "response.output_text.delta"
            )
            await self.send(event(kind, **self._where(), delta=delta.text))
        chunk = delta.audio
        if self.spoken and isinstance(chunk, AudioChunk) and len(chunk.samples):
            samples = chunk.samples
            if chunk.sample_rate != SAMPLE_RATE:  # a model that ignored the asked rate
                from omni_core.media.dsp import resample

                samples = resample(samples, chunk.sample_rate, SAMPLE_RATE)
            data = to_pcm16(samples)
            if self.first_audio_at is None:
                self.first_audio_at = time.monotonic()
            self.audio_bytes += len(data)
            await self.send(
                event(
                    "response.output_audio.delta",
                    **self._where(),
                    delta=base64.b64encode(data).decode(),
                )
            )

    async def _close(
        self, status: str, reason: str | None, usage: Any, *, truncated: bool = False
    ) -> None:
        where = self._where()
        text = self.item.text
        opened = self.item in self.session.items
        if opened:
            if self.spoken:
                await self.send(event("response.output_audio.done", **where))
                await self.send(
                    event("response.output_audio_transcript.done", **where, transcript=text)
                )
                part = {"type": "audio", "transcript": text}
            else:
                await self.send(event("response.output_text.done", **where, text=text))
                part = {"type": "text", "text": text}
            await self.send(event("response.content_part.done", **where, part=part))
            item = self.item_shape()
            await self.send(
                event("response.output_item.done", response_id=self.id, output_index=0, item=item)
            )
            await self.send(event("conversation.item.done", previous_item_id=None, item=item))
            if truncated and self.spoken:
                ms = self.audio_bytes * 1000 // (2 * SAMPLE_RATE)
                await self.send(
                    event(
                        "conversation.item.truncated",
                        item_id=self.item.id,
                        content_index=0,
                        audio_end_ms=ms,
                    )
                )
        details = None if reason is None else {"type": status, "reason": reason}
        shape = self.shape(status, [self.item_shape()] if opened else [], status_details=details)
        if usage is not None:
            shape["usage"] = {
                "total_tokens": usage.total_tokens,
                "input_tokens": usage.prompt_tokens,
                "output_tokens": usage.completion_tokens,
            }
        await self.send(event("response.done", response=shape))


async def stop(task: asyncio.Task[None], answer: Answer, reason: str | None) -> None:
    """Cancel a running answer (``reason`` None: the client left) and wait for its end."""
    answer.reason = reason
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
