"""What a chat request carries and what a chat answer streams: typed, model-agnostic.

The server turns OpenAI's chat ``messages`` (text, ``image_url``, ``input_audio`` and video
parts) into :class:`ChatMessage` objects whose :class:`ChatPart` items hold decoded media
(PIL images, float32 PCM, video frames), so a chat pipeline never parses JSON, fetches URLs
or decodes files. A pipeline answers with :class:`ChatDelta` objects: text deltas, audio
deltas, and a last one carrying the finish reason and token usage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.contract.types import AudioChunk

#: The roles a conversation may hold.
Role = Literal["system", "user", "assistant"]
#: What a content part holds.
PartKind = Literal["text", "image", "audio", "video"]
#: The output modalities a chat request may ask for.
Modality = Literal["text", "audio"]


@dataclass
class ChatPart:
    """One content part, decoded.

    ``text`` for text; ``image`` a PIL image; ``audio`` float32 mono PCM at ``sample_rate``;
    ``video`` a ``[frames, H, W, 3]`` uint8 array at ``fps`` (its sound track, when sent, in
    ``audio``/``sample_rate``).
    """

    kind: PartKind
    text: str | None = None
    image: Any = None
    audio: Any = None
    sample_rate: int | None = None
    video: Any = None
    fps: float | None = None


@dataclass
class ChatMessage:
    """One turn of the conversation."""

    role: Role
    parts: list[ChatPart] = field(default_factory=list)

    @classmethod
    def text(cls, role: Role, text: str) -> ChatMessage:
        return cls(role=role, parts=[ChatPart(kind="text", text=text)])

    @property
    def plain_text(self) -> str:
        """The message's text parts, joined (what a text-only model reads)."""
        return "".join(p.text or "" for p in self.parts if p.kind == "text")


@dataclass
class ChatUsage:
    """Tokens of one answer (OpenAI's ``usage``)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class ChatDelta:
    """A delta of a chat answer: never cumulative.

    ``text`` is new text of the answer; ``audio`` new speech of it (at the answer's rate).
    The last delta of an answer has ``finish_reason`` (``"stop"``: the model ended it,
    ``"length"``: ``max_tokens`` did) and ``usage``.
    """

    text: str = ""
    audio: AudioChunk | None = None
    finish_reason: Literal["stop", "length"] | None = None
    usage: ChatUsage | None = None
