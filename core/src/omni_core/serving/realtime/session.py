"""What one ``/v1/realtime`` session holds: its settings, its conversation (every turn's text
and audio, the model's own answers as their transcripts: what the next answer reads), the
input audio buffer, and the limits that bound them (duration, audio bytes, turns)."""

from __future__ import annotations

import base64
import binascii
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omni_core.serving.realtime.events import (
    SAMPLE_RATE,
    EventError,
    default_session,
    new_id,
    user_item,
)

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from omni_core.contract.messages import ChatMessage
    from omni_core.serving.config import ServerConfig

#: Bytes of one second of input audio (PCM16 mono at 24 kHz).
BYTES_PER_S = SAMPLE_RATE * 2


@dataclass
class Item:
    """One conversation item: a user turn (text and/or audio) or an assistant answer."""

    id: str
    role: str
    text: str = ""
    #: float32 mono PCM at 24 kHz (user audio), or None.
    audio: np.ndarray | None = None
    status: str = "completed"
    #: What the client was sent for it (``conversation.item.*`` events).
    shape: dict[str, Any] = field(default_factory=dict)


def pcm16(data: bytes) -> np.ndarray:
    """PCM16 little-endian bytes -> float32 samples in [-1, 1)."""
    import numpy as np

    return np.frombuffer(data[: len(data) // 2 * 2], dtype="<i2").astype(np.float32) / 32768.0


def to_pcm16(samples: np.ndarray) -> bytes:
    """float32 samples -> PCM16 little-endian bytes (clipped to [-1, 1])."""
    import numpy as np

    return (np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def decode_b64(value: Any, param: str) -> bytes:
    if not isinstance(value, str):
        raise EventError(f"{param}: expected base64 PCM16 audio", "invalid_value", param)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise EventError(f"{param}: not valid base64", "invalid_value", param) from None


class RealtimeSession:
    """One session's state (the route drives it; nothing here touches the socket)."""

    def __init__(self, model: str, voice: str | None, config: ServerConfig) -> None:
        self.config = config
        self.settings = default_session(model, voice, config.realtime_max_s)
        self.items: list[Item] = []
        self.buffer = bytearray()
        self.audio_bytes = 0
        self.turns = 0
        self.started = time.monotonic()
        #: The item the buffer will become (``speech_started`` names it before the commit).
        self.pending_item = new_id("item")

    # -- input audio ------------------------------------------------------------------------
    def append(self, data: bytes) -> None:
        self.count_audio(len(data))
        self.buffer += data

    def count_audio(self, size: int) -> None:
        limit = self.config.realtime_max_audio_bytes
        if self.audio_bytes + size > limit:
            raise EventError(
                f"the session's input audio would pass {limit} bytes (the session limit)",
                "session_audio_limit",
                "audio",
                fatal=True,
            )
        self.audio_bytes += size

    def clear(self) -> None:
        self.buffer.clear()

    def commit(self, start: int = 0, end: int | None = None) -> Item:
        """The buffer (bytes ``start:end``) as a user audio item; the buffer empties."""
        data = bytes(self.buffer[start:end])
        self.buffer.clear()
        if len(data) < BYTES_PER_S // 10:
            raise EventError(
                f"buffer too small: expected at least 100ms of audio, got "
                f"{len(data) * 1000 // BYTES_PER_S}ms",
                "input_audio_buffer_commit_empty",
            )
        item_id, self.pending_item = self.pending_item, new_id("item")
        item = Item(item_id, "user", audio=pcm16(data))
        item.shape = user_item(item_id, [{"type": "input_audio", "transcript": None}])
        self.add(item)
        return item

    # -- the conversation -------------------------------------------------------------------
    def add(self, item: Item, after: str | None = None) -> str | None:
        """Add ``item`` (after ``after``, or last); returns the id of the item before it."""
        if any(it.id == item.id for it in self.items):
            raise EventError(
                f"item.id: {item.id!r} is in the conversation already", "invalid_value", "item.id"
            )
        if item.role == "user":
            self.count_turn()
        if after is None:
            previous = self.items[-1].id if self.items else None
            self.items.append(item)
            return previous
        at = next((i for i, it in enumerate(self.items) if it.id == after), None)
        if at is None:
            raise EventError(
                f"previous_item_id: no item {after!r}", "item_not_found", "previous_item_id"
            )
        self.items.insert(at + 1, item)
        return after

    def count_turn(self) -> None:
        if self.turns >= self.config.realtime_max_turns:
            raise EventError(
                f"the session has had {self.turns} user turns (the session limit)",
                "session_turn_limit",
                fatal=True,
            )
        self.turns += 1

    def find(self, item_id: Any) -> Item:
        for item in self.items:
            if item.id == item_id:
                return item
        raise EventError(f"item_id: no item {item_id!r}", "item_not_found", "item_id")

    def item_from_client(self, value: Any) -> Item:
        """``conversation.item.create``'s ``item``: a user, system or assistant message."""
        if not isinstance(value, dict) or value.get("type", "message") != "message":
            kind = value.get("type") if isinstance(value, dict) else None
            raise EventError(
                f"item.type: omni takes message items only, got {kind!r}",
                "invalid_value",
                "item.type",
            )
        role = value.get("role")
        if role not in ("user", "assistant", "system"):
            raise EventError(
                "item.role: expected user, assistant or system", "invalid_value", "item.role"
            )
        content = value.get("content")
        if not isinstance(content, list) or not content:
            raise EventError(
                "item.content: expected a list of parts", "invalid_value", "item.content"
            )
        texts: list[str] = []
        audio: list[np.ndarray] = []
        shape: list[dict[str, Any]] = []
        allowed = {
            "user": ("input_text", "input_audio"),
            "system": ("input_text",),
            "assistant": ("output_text", "output_audio", "text"),
        }[role]
        for i, part in enumerate(content):
            param = f"item.content[{i}]"
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in allowed:
                raise EventError(
                    f"{param}.type: a {role} item holds {', '.join(allowed)}, got {kind!r}",
                    "invalid_value",
                    f"{param}.type",
                )
            if kind == "input_audio":
                data = decode_b64(part.get("audio"), f"{param}.audio")
                self.count_audio(len(data))
                audio.append(pcm16(data))
                shape.append({"type": "input_audio", "transcript": None})
                continue
            key = "transcript" if kind == "output_audio" else "text"
            text = part.get(key)
            if not isinstance(text, str):
                raise EventError(
                    f"{param}.{key}: expected a string", "invalid_value", f"{param}.{key}"
                )
            texts.append(text)
            shape.append({"type": kind, key: text})
        import numpy as np

        item_id = value.get("id") if isinstance(value.get("id"), str) else new_id("item")
        item = Item(item_id, role, text="".join(texts))
        if audio:
            item.audio = np.concatenate(audio)
        item.shape = {**user_item(item_id, shape), "role": role}
        return item

    def messages(self) -> list[ChatMessage]:
        """The conversation as the chat contract reads it: instructions as the system turn,
        user text and audio, the model's earlier answers as their text."""
        from omni_core.contract.messages import ChatMessage, ChatPart

        out: list[ChatMessage] = []
        if self.settings["instructions"]:
            out.append(ChatMessage.text("system", self.settings["instructions"]))
        for item in self.items:
            parts: list[ChatPart] = []
            if item.text or item.audio is None:
                parts.append(ChatPart(kind="text", text=item.text))
            if item.audio is not None:
                parts.append(ChatPart(kind="audio", audio=item.audio, sample_rate=SAMPLE_RATE))
            out.append(ChatMessage(role=item.role, parts=parts))  # type: ignore[arg-type]
        return out

    def remaining_s(self) -> float:
        return self.config.realtime_max_s - (time.monotonic() - self.started)
