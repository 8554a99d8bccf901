"""A VibeVoice script: the text's "Speaker N:" lines as the conversation the processor formats.

VibeVoice speaks a dialogue of up to four speakers in one request. Its processor's chat
template takes a conversation whose turns have the speaker's number as ``role`` and one audio
part (a voice prompt) in the first turn of each speaker that has a voice to clone; the prompt
then holds every voice prompt, then every line (" Speaker N: text"). This module turns a
request into that conversation; it knows no torch (the pipeline encodes the prompts).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omni_core import InvalidRequestError

#: VibeVoice speaks a script of up to four speakers ("Speaker 0:" .. "Speaker 3:").
SPEAKERS = ("speaker_0", "speaker_1", "speaker_2", "speaker_3")
#: The label that opens a line of a script ("Speaker N:"; ``SpeechPipeline.script_label``).
LABEL = r"speaker\s*\d+\s*:"
#: A line of a script: "Speaker N: what N says" (N: the speaker's number).
_LINE = re.compile(r"^\s*speaker\s*(\d+)\s*:\s*(.*?)\s*$", re.IGNORECASE)
#: Keys of ``speakers``: "N", "Speaker N" or "speaker_N".
_LABEL = re.compile(r"^\s*(?:speaker[\s_]*)?(\d+)\s*$", re.IGNORECASE)


@dataclass
class Script:
    """The turns of a request ((speaker, text) in order) and the voice prompt of each speaker
    that has one (``prompts``: speaker -> its voice, whatever :func:`parse` was given)."""

    turns: list[tuple[int, str]]
    prompts: dict[int, Any] = field(default_factory=dict)

    def conversation(self) -> list[dict[str, Any]]:
        """The processor's conversation: one turn per line, an audio part in the first turn
        of each speaker with a voice prompt (the template lists the prompts in that order)."""
        out, prompted = [], set()
        for speaker, text in self.turns:
            parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
            if speaker in self.prompts and speaker not in prompted:
                parts.append({"type": "audio"})
                prompted.add(speaker)
            out.append({"role": str(speaker), "content": parts})
        return out

    def prompt_order(self) -> list[int]:
        """The speakers whose voice prompts the prompt holds, in its order."""
        seen: list[int] = []
        for speaker, _ in self.turns:
            if speaker in self.prompts and speaker not in seen:
                seen.append(speaker)
        return seen


def speaker_of(voice: str) -> int:
    """``speaker_N`` -> N."""
    return SPEAKERS.index(voice)


def _label(key: str) -> int:
    match = _LABEL.match(key)
    if match is None or int(match.group(1)) >= len(SPEAKERS):
        raise InvalidRequestError(
            f"speakers: {key!r} is not a speaker label; expected 0..{len(SPEAKERS) - 1} "
            '("1", "Speaker 1" or "speaker_1")',
            param="speakers",
        )
    return int(match.group(1))


def speakers_in(text: str, speakers: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``speakers`` whose labels have lines in ``text`` (a piece of a longer
    script); a key that is no speaker label is an InvalidRequestError."""
    labels = {int(m.group(1)) for m in map(_LINE.match, text.splitlines()) if m is not None}
    return {key: value for key, value in speakers.items() if _label(key) in labels}


def parse(
    text: str,
    voice: str | None,
    *,
    reference: Any = None,
    speakers: Mapping[str, Any] | None = None,
) -> Script:
    """``text`` as a script: its "Speaker N:" lines, each a turn of N (a text with none is one
    turn of ``voice``, speaker 0 by default; lines without a label continue the turn above).

    ``reference`` is the voice prompt of the default speaker (``voice``'s); ``speakers`` maps a
    label to ``speaker_K`` (the label's lines are spoken as speaker K) or to a voice prompt."""
    default = 0 if voice is None else speaker_of(voice)
    turns: list[tuple[int, str]] = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is not None:
            turns.append((int(match.group(1)), match.group(2)))
        elif line.strip():
            if turns:
                turns[-1] = (turns[-1][0], f"{turns[-1][1]} {line.strip()}".strip())
            else:
                turns.append((default, line.strip()))
    turns = [(s, t) for s, t in turns if t]
    if not turns:
        raise InvalidRequestError("input: the script has no line to speak", param="input")
    for speaker, _ in turns:
        if speaker >= len(SPEAKERS):
            raise InvalidRequestError(
                f"input: 'Speaker {speaker}': VibeVoice speaks speakers 0..{len(SPEAKERS) - 1}",
                param="input",
            )
    prompts: dict[int, Any] = {} if reference is None else {default: reference}
    labels = {s for s, _ in turns}
    rename: dict[int, int] = {}
    for key, value in (speakers or {}).items():
        label = _label(key)
        if label not in labels:
            raise InvalidRequestError(
                f"speakers: {key!r}: Speaker {label} says nothing in the input", param="speakers"
            )
        if isinstance(value, str):
            rename[label] = speaker_of(value)  # the pipeline checked it is a voice of its own
        else:
            prompts[label] = value
    if rename:
        turns = [(rename.get(s, s), t) for s, t in turns]
        moved = {rename.get(s, s): p for s, p in prompts.items()}
        if len(moved) != len(prompts):
            raise InvalidRequestError(
                "speakers: two speakers with voice prompts speak as one", param="speakers"
            )
        prompts = moved
    return Script(turns, prompts)
