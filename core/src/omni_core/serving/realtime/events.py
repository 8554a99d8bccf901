"""The Realtime API's GA event shapes: the session a client configures, the items of its
conversation, and the ``error`` event (OpenAI's: ``{"type": "error", "event_id", "error":
{"type", "code", "message", "param", "event_id"}}``, the last naming the client event it is
about). Only what omni serves is accepted; anything else is an error naming the field."""

from __future__ import annotations

import copy
import time
import uuid
from typing import Any

#: The one audio format both ways: 16-bit little-endian mono PCM at 24 kHz (OpenAI's).
PCM_FORMAT = {"type": "audio/pcm", "rate": 24000}
SAMPLE_RATE = 24000
#: Server VAD's defaults (OpenAI's).
VAD_DEFAULTS: dict[str, Any] = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
    "create_response": True,
    "interrupt_response": True,
    "idle_timeout_ms": None,
}
#: Session fields accepted and not applied (OpenAI's; omni has no tools or tracing).
IGNORED_SESSION = ("tools", "tool_choice", "tracing", "truncation", "prompt", "include")


class EventError(Exception):
    """A client event omni cannot apply: answered with an ``error`` event, the session goes on
    (``fatal``: the session then ends)."""

    def __init__(
        self, message: str, code: str, param: str | None = None, *, fatal: bool = False
    ) -> None:
        super().__init__(message)
        self.code, self.param, self.fatal = code, param, fatal


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def event(kind: str, **fields: Any) -> dict[str, Any]:
    """A server event: its ``type``, a fresh ``event_id``, the fields."""
    return {"type": kind, "event_id": new_id("event"), **fields}


def error_event(message: str, code: str, param: str | None, client_event_id: str | None) -> dict:
    return event(
        "error",
        error={
            "type": "invalid_request_error",
            "code": code,
            "message": message,
            "param": param,
            "event_id": client_event_id,
        },
    )


def default_session(model: str, voice: str | None, max_s: float) -> dict[str, Any]:
    """The session a client gets before any ``session.update``."""
    return {
        "type": "realtime",
        "object": "realtime.session",
        "id": new_id("sess"),
        "model": model,
        "output_modalities": ["audio"],
        "instructions": "",
        "audio": {
            "input": {
                "format": dict(PCM_FORMAT),
                "transcription": None,
                "noise_reduction": None,
                "turn_detection": dict(VAD_DEFAULTS),
            },
            "output": {"format": dict(PCM_FORMAT), "voice": voice, "speed": 1.0},
        },
        "max_output_tokens": "inf",
        "tools": [],
        "tool_choice": "auto",
        "tracing": None,
        "truncation": "auto",
        "prompt": None,
        "expires_at": int(time.time() + max_s),
    }


def _check_format(value: Any, param: str) -> dict[str, Any]:
    if not isinstance(value, dict) or value.get("type") != "audio/pcm":
        raise EventError(
            f"{param}: omni speaks audio/pcm (16-bit mono PCM at 24 kHz) only",
            "invalid_value",
            param,
        )
    if value.get("rate", SAMPLE_RATE) != SAMPLE_RATE:
        raise EventError(f"{param}.rate: expected {SAMPLE_RATE}", "invalid_value", f"{param}.rate")
    return dict(PCM_FORMAT)


def _number(value: Any, param: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise EventError(
            f"{param}: expected a number from {low:g} to {high:g}", "invalid_value", param
        )
    return value


def _turn_detection(value: Any, current: dict[str, Any] | None) -> dict[str, Any] | None:
    param = "session.audio.input.turn_detection"
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type", "server_vad") != "server_vad":
        kind = value.get("type") if isinstance(value, dict) else value
        raise EventError(
            f"{param}.type: omni detects turns with server_vad only (or null: commit yourself), "
            f"got {kind!r}",
            "invalid_value",
            f"{param}.type",
        )
    out = dict(current or VAD_DEFAULTS)
    limits = {"threshold": (0.0, 1.0), "prefix_padding_ms": (0, 5000)}
    limits["silence_duration_ms"] = (20, 10_000)
    for key, value_ in value.items():
        if key in limits:
            out[key] = _number(value_, f"{param}.{key}", *limits[key])
        elif key in ("create_response", "interrupt_response"):
            if not isinstance(value_, bool):
                raise EventError(
                    f"{param}.{key}: expected a boolean", "invalid_value", f"{param}.{key}"
                )
            out[key] = value_
        elif key == "idle_timeout_ms":
            out[key] = None if value_ is None else _number(value_, f"{param}.{key}", 5000, 30e6)
        elif key != "type":
            raise EventError(f"{param}.{key}: not supported", "unknown_parameter", f"{param}.{key}")
    return out


def apply_update(session: dict[str, Any], update: Any, voices: list[str]) -> dict[str, Any]:
    """``session.update``'s ``session`` over the current one (a copy; nothing changes when a
    field is refused)."""
    if not isinstance(update, dict):
        raise EventError("session: expected an object", "invalid_value", "session")
    out = copy.deepcopy(session)
    for key, value in update.items():
        param = f"session.{key}"
        if key == "type":
            if value != "realtime":
                raise EventError(f"{param}: expected 'realtime'", "invalid_value", param)
        elif key == "model":
            if value != session["model"]:
                raise EventError(f"{param}: a session keeps its model", "invalid_value", param)
        elif key == "instructions":
            if not isinstance(value, str):
                raise EventError(f"{param}: expected a string", "invalid_value", param)
            out[key] = value
        elif key == "output_modalities":
            out[key] = output_modalities(value, param)
        elif key == "temperature":  # the beta API's field (GA dropped it): 0 is greedy
            out[key] = _number(value, param, 0.0, 2.0)
        elif key == "max_output_tokens":
            if value != "inf":
                _number(value, param, 1, 4096)
            out[key] = value
        elif key == "audio":
            _apply_audio(out["audio"], value, voices)
        elif key not in IGNORED_SESSION:
            raise EventError(f"{param}: not supported", "unknown_parameter", param)
    return out


def _apply_audio(audio: dict[str, Any], value: Any, voices: list[str]) -> None:
    if not isinstance(value, dict):
        raise EventError("session.audio: expected an object", "invalid_value", "session.audio")
    given_in, given_out = value.get("input") or {}, value.get("output") or {}
    for key, item in given_in.items():
        param = f"session.audio.input.{key}"
        if key == "format":
            audio["input"]["format"] = _check_format(item, param)
        elif key == "turn_detection":
            audio["input"]["turn_detection"] = _turn_detection(
                item, audio["input"]["turn_detection"]
            )
        elif key in ("transcription", "noise_reduction"):
            if item is not None:
                raise EventError(
                    f"{param}: not supported (send null)", "unsupported_parameter", param
                )
        else:
            raise EventError(f"{param}: not supported", "unknown_parameter", param)
    for key, item in given_out.items():
        param = f"session.audio.output.{key}"
        if key == "format":
            audio["output"]["format"] = _check_format(item, param)
        elif key == "voice":
            if item not in voices:
                raise EventError(
                    f"{param}: unknown voice {item!r}; available: {', '.join(voices) or 'none'}",
                    "invalid_value",
                    param,
                )
            audio["output"]["voice"] = item
        elif key == "speed":
            if item != 1 and item != 1.0:
                raise EventError(
                    f"{param}: omni speaks at speed 1.0", "unsupported_parameter", param
                )
        else:
            raise EventError(f"{param}: not supported", "unknown_parameter", param)


def output_modalities(value: Any, param: str) -> list[str]:
    """``["audio"]`` (speech and its transcript) or ``["text"]``, as OpenAI's."""
    if value not in (["audio"], ["text"], ["text", "audio"], ["audio", "text"]):
        raise EventError(f"{param}: expected ['audio'] or ['text']", "invalid_value", param)
    return ["audio"] if "audio" in value else ["text"]


def user_item(item_id: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "status": "completed",
        "role": "user",
        "content": content,
    }


def assistant_item(item_id: str, audio: bool, status: str, transcript: str) -> dict[str, Any]:
    part = (
        {"type": "output_audio", "transcript": transcript}
        if audio
        else {"type": "output_text", "text": transcript}
    )
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [part],
    }
