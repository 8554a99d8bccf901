"""A third-party multi-speaker voice, through ``omni_core``'s faces only: it speaks a script of
``<name>: text`` lines (its own label, not VibeVoice's), each speaker in a voice of its own.

Every line is a tone whose pitch is its speaker's voice and whose length is its text's; a
labelled speaker without a voice in ``speakers`` speaks ``mid``, text before any label the
request's ``voice``. So which voice spoke which sentence is in the samples themselves.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from omni_core import (
    GenerationRequest,
    InvalidRequestError,
    PipelineCapabilities,
    PipelineSpec,
    hookimpl,
)
from omni_core.speech import ReferenceVoice, StreamingSpeechPipeline, Voice

ARCH = "AcmeDialogue"
#: Voice -> pitch (Hz).
PITCH = {"low": 220.0, "mid": 330.0, "high": 440.0}
#: The label that opens a line: "<name>:".
LABEL = r"<\w+>\s*:"
_LINE = re.compile(r"^\s*<(\w+)>\s*:\s*(.*)$")
_NAME = re.compile(r"^\w+$")


def _lines(text: str) -> list[tuple[str | None, str]]:
    """(speaker name or None, its text) per line; a line without a label continues the last."""
    out: list[tuple[str | None, str]] = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is not None:
            out.append((match.group(1), match.group(2).strip()))
        elif line.strip():
            name, said = out[-1] if out else (None, "")
            out[-1:] = [(name, f"{said} {line.strip()}".strip())]
    return [(n, t) for n, t in out if t]


def _check_names(speakers: Mapping[str, Any]) -> None:
    for key in speakers:
        if not _NAME.match(key):
            raise InvalidRequestError(f"speakers: {key!r} is not a name", param="speakers")


class AcmeDialoguePipeline(StreamingSpeechPipeline):
    """A tone per line, in its speaker's pitch."""

    sample_rate = 16000
    native_speed = True
    max_speakers = 2
    script_label = LABEL

    @classmethod
    def from_pretrained(cls, path: Path, options: Any) -> AcmeDialoguePipeline:
        return cls()

    def voices(self) -> list[Voice]:
        return [Voice(id=v, name=v) for v in PITCH]

    def speakers_in(
        self, text: str, speakers: Mapping[str, str | ReferenceVoice]
    ) -> dict[str, str | ReferenceVoice]:
        _check_names(speakers)
        named = {name for name, _ in _lines(text) if name is not None}
        return {key: value for key, value in speakers.items() if key in named}

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        request = super().validate(request)
        _check_names(request.speakers)
        named = {name for name, _ in _lines(request.prompt)}
        for key in request.speakers:
            if key not in named:
                raise InvalidRequestError(
                    f"speakers: {key!r} says nothing in the input", param="speakers"
                )
        return request

    def synthesize(self, request: GenerationRequest) -> Iterator[np.ndarray]:
        voice = request.voice or "low"
        for name, text in _lines(request.prompt):
            spoken = voice if name is None else str(request.speakers.get(name, "mid"))
            t = np.arange(len(text) * 40) / self.sample_rate
            yield (0.3 * np.sin(2 * np.pi * PITCH[spoken] * t)).astype(np.float32)


def build_tiny_checkpoint(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"architectures": [ARCH]}))
    return path


class AcmeDialoguePlugin:
    @hookimpl
    def omni_register_pipelines(self, register: Callable[[PipelineSpec], None]) -> None:
        register(
            PipelineSpec(
                name="acme-dialogue",
                implementation=f"{__name__}:AcmeDialoguePipeline",
                tasks=("tts",),
                architectures=(ARCH,),
                capabilities=PipelineCapabilities(streaming=True),
                description="A third-party multi-speaker voice (a tone per line).",
            )
        )
