"""OpenAI chat ``messages`` -> :class:`~omni_core.chat.ChatMessage` objects with decoded media.

What a chat model is sent, read once at the HTTP edge (the pipeline never parses JSON or
fetches anything):

- roles ``system`` (and ``developer``, OpenAI's newer name for it), ``user`` and ``assistant``
  (earlier answers: their text, or the transcript of an audio answer named by ``audio.id``);
  ``tool`` / ``function`` turns are a 400 (no tool calls are served);
- content as a string or a list of parts: ``text``; ``image_url`` ``{url}``; ``input_audio``
  ``{data (base64), format}`` (OpenAI's); ``audio_url`` and ``video_url`` ``{url}``
  (vLLM-Omni's). URLs are data URLs, or http(s) from ``--allowed-url-hosts`` only.

Every input is bounded before and while it is decoded: bytes by ``--max-upload-mb``, image
pixels by ``--max-upload-pixels`` (all images of the request together), audio seconds and
video frames as :mod:`omni_core.serving.chat_media` says (a long clip is sampled evenly in
time, and the response's ``X-Omni-Adjusted-Fields`` says so); parts per request by
``--max-images``, :data:`MAX_AUDIO_PARTS` and :data:`MAX_VIDEO_PARTS`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import InvalidRequestError
from omni_core.contract.messages import ChatMessage, ChatPart
from omni_core.serving import chat_media, compat, media
from omni_core.serving.errors import from_exception, invalid

if TYPE_CHECKING:  # pragma: no cover
    from fastapi import Request

    from omni_core.serving.state import ServerState

#: Most audio / video parts per request.
MAX_AUDIO_PARTS = 8
MAX_VIDEO_PARTS = 4
#: Audio formats ``input_audio.format`` may name (what PyAV reads).
AUDIO_FORMATS = ("wav", "mp3", "flac", "ogg", "m4a", "webm", "aac", "opus")
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


@dataclass
class _Pending:
    """A media part to fetch and decode: its place in the message and where it comes from."""

    part: ChatPart
    kind: str
    param: str
    url: str
    #: ``video_url.num_frames`` (vLLM-Omni's): the frames to sample the clip to.
    num_frames: int | None = None


@dataclass
class ParsedMessages:
    messages: list[ChatMessage] = field(default_factory=list)
    pending: list[_Pending] = field(default_factory=list)
    #: Fields accepted and not used (``image_url.detail``: OpenAI's own resizing hint).
    ignored: list[str] = field(default_factory=list)


#: What a media part's object may hold besides ``url``.
_MEDIA_FIELDS = {"image_url": {"detail"}, "video_url": {"num_frames"}, "audio_url": set()}


def _pending(part: dict[str, Any], kind: str, at: str, chat_part: ChatPart) -> _Pending:
    value = part.get(kind)
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str) or not url:
        raise invalid(f"{at}.{kind}: expected {{'url': URL}} (a data URL or an http(s) URL)", at)
    fields = value if isinstance(value, dict) else {}
    unknown = sorted(set(fields) - {"url"} - _MEDIA_FIELDS[kind])
    if unknown:
        name = f"{at}.{kind}.{unknown[0]}"
        raise invalid(f"{name}: not supported", name, code="unknown_parameter")
    frames = fields.get("num_frames")
    if frames is not None and (
        not isinstance(frames, int) or not 1 <= frames <= chat_media.MAX_VIDEO_FRAMES
    ):
        name = f"{at}.video_url.num_frames"
        raise invalid(f"{name}: expected 1 to {chat_media.MAX_VIDEO_FRAMES}", name)
    return _Pending(chat_part, chat_part.kind, f"{at}.{kind}", url, frames)


def _part(part: Any, at: str, role: str, parsed: ParsedMessages) -> ChatPart:
    if isinstance(part, str):
        return ChatPart(kind="text", text=part)
    if not isinstance(part, dict):
        raise invalid(f"{at}: expected an object", at)
    kind = part.get("type")
    if kind in ("text", "input_text", "output_text", "refusal"):
        text = part.get("refusal" if kind == "refusal" else "text")
        if not isinstance(text, str):
            raise invalid(f"{at}.text: expected a string", at)
        return ChatPart(kind="text", text=text)
    media_kinds = {
        "image_url": "image",
        "input_audio": "audio",
        "audio_url": "audio",
        "video_url": "video",
    }
    if kind not in media_kinds:
        raise invalid(
            f"{at}: part type {kind!r} is not supported "
            "(text, image_url, input_audio, audio_url, video_url)",
            at,
            code="unsupported_parameter",
        )
    if role != "user":
        raise invalid(f"{at}: a {role} message holds text only; send media in a user message", at)
    chat_part = ChatPart(kind=media_kinds[kind])  # type: ignore[arg-type]
    if kind == "input_audio":
        audio = part.get("input_audio")
        data = audio.get("data") if isinstance(audio, dict) else None
        fmt = audio.get("format") if isinstance(audio, dict) else None
        if not isinstance(data, str) or not data:
            raise invalid(f"{at}.input_audio.data: expected base64 audio", at)
        if fmt not in AUDIO_FORMATS:
            raise invalid(
                f"{at}.input_audio.format: expected one of {', '.join(AUDIO_FORMATS)}", at
            )
        url = data if data.startswith("data:") else f"data:audio/{fmt};base64,{data}"
        parsed.pending.append(_Pending(chat_part, "audio", f"{at}.input_audio", url))
    else:
        parsed.pending.append(_pending(part, kind, at, chat_part))
        if isinstance(part[kind], dict) and "detail" in part[kind]:
            parsed.ignored.append(f"{at}.image_url.detail")
    return chat_part


#: What a message may hold besides ``role`` and ``content``, and for which roles.
_MESSAGE_FIELDS = {
    "name": set(_ROLES),
    "audio": {"assistant"},
    "refusal": {"assistant"},
    "tool_calls": {"assistant"},
    "function_call": {"assistant"},
}


def _check_fields(message: dict[str, Any], at: str, role: str, parsed: ParsedMessages) -> None:
    """Tool calls are a 400 (none are served); a participant ``name`` and an assistant's
    ``refusal`` are accepted and reported (no chat template reads them); others are a 400."""
    for key in sorted(set(message) - {"role", "content"}):
        if role not in _MESSAGE_FIELDS.get(key, ()):
            raise invalid(
                f"{at}.{key}: not supported in a {role} message",
                f"{at}.{key}",
                code="unknown_parameter",
            )
        if key in ("tool_calls", "function_call") and message[key]:
            raise invalid(
                f"{at}.{key}: tool calls are not served",
                f"{at}.{key}",
                code="unsupported_parameter",
            )
        if key in ("name", "refusal") and message[key] is not None:
            parsed.ignored.append(f"{at}.{key}")


def parse_messages(raw: list[dict[str, Any]], transcripts: dict[str, str]) -> ParsedMessages:
    """The conversation's structure (no media decoded yet: see :func:`decode_media`).

    ``transcripts`` maps the ids of earlier audio answers to their text (an assistant turn
    may name its audio by ``audio.id`` only, as OpenAI's multi-turn audio examples do).
    """
    parsed = ParsedMessages()
    for i, message in enumerate(raw):
        at = f"messages[{i}]"
        role = message.get("role")
        if role in ("tool", "function"):
            raise invalid(
                f"{at}: {role} messages need tool calls, which are not served",
                at,
                code="unsupported_parameter",
            )
        if role not in _ROLES:
            raise invalid(f"{at}.role: expected system, developer, user or assistant", at)
        _check_fields(message, at, role, parsed)
        content = message.get("content")
        audio = message.get("audio")
        if role == "assistant" and not content and isinstance(audio, dict):
            text = transcripts.get(str(audio.get("id")))
            if text is None:
                raise invalid(
                    f"{at}.audio.id: unknown or expired audio answer; send its transcript as "
                    "the message's content",
                    at,
                )
            content = text
        if content is None or content == "" or content == []:
            raise invalid(f"{at}.content: the message is empty", at)
        if isinstance(content, str):
            parts = [ChatPart(kind="text", text=content)]
        elif isinstance(content, list):
            parts = [
                _part(p, f"{at}.content[{j}]", _ROLES[role], parsed) for j, p in enumerate(content)
            ]
        else:
            raise invalid(f"{at}.content: expected a string or a list of parts", at)
        parsed.messages.append(ChatMessage(role=_ROLES[role], parts=parts))  # type: ignore[arg-type]
    return parsed


async def decode_media(parsed: ParsedMessages, state: ServerState, request: Request) -> None:
    """Fetch and decode every media part in place, within the server's limits."""
    for name in parsed.ignored:
        compat.ignore(request, name)
    config = state.config
    counts = {k: sum(p.kind == k for p in parsed.pending) for k in ("image", "audio", "video")}
    limits = {"image": config.max_images, "audio": MAX_AUDIO_PARTS, "video": MAX_VIDEO_PARTS}
    for kind, count in counts.items():
        if count > limits[kind]:
            raise invalid(f"messages: at most {limits[kind]} {kind} parts per request", "messages")
    blobs: list[bytes] = []
    for pending in parsed.pending:
        blobs.append(
            await media.fetch_url(
                pending.url,
                param=pending.param,
                allowed_hosts=state.allowed_hosts,
                max_bytes=config.max_upload_bytes,
                deadline_s=config.url_fetch_timeout_s,
            )
        )
    images = [(p.param, b) for p, b in zip(parsed.pending, blobs, strict=True) if p.kind == "image"]
    decoded = iter(await asyncio.to_thread(media.decode_images, images, config.max_upload_pixels))
    for pending, blob in zip(parsed.pending, blobs, strict=True):
        part = pending.part
        try:
            if pending.kind == "image":
                part.image = next(decoded)
            elif pending.kind == "audio":
                part.audio, part.sample_rate = await asyncio.to_thread(
                    chat_media.decode_audio, blob, pending.param
                )
            else:
                video = await asyncio.to_thread(
                    chat_media.decode_video,
                    blob,
                    pending.param,
                    config.max_upload_pixels,
                    pending.num_frames,
                )
                part.video, part.fps = video.frames, video.fps
                part.audio, part.sample_rate = video.audio, video.sample_rate
                fewer = len(video.frames) < (pending.num_frames or video.sampled_from or 0)
                if video.sampled_from is not None and fewer:
                    compat.adjust(
                        request,
                        f"{pending.param}: {video.sampled_from} frames -> "
                        f"{len(video.frames)} at {video.fps:.3g} fps (evenly in time)",
                    )
        except InvalidRequestError as exc:
            raise from_exception(exc) from None
