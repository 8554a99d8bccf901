"""VITS / MMS-TTS through transformers' ``VitsModel``: one forward per sentence, streamed."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from omni_core import GenerationRequest, PipelineOptions
from omni_core.speech import Voice
from omni_tts.common import (
    DEFAULT_VOICE,
    SegmentExtras,
    TransformersSpeechPipeline,
    load_pretrained,
    request_seed,
    segments,
)

_MODEL_INPUTS = ("input_ids", "attention_mask")


def _speakable(tokenizer: Any) -> str | None:
    """The characters an MMS-TTS tokenizer keeps, as a character class: with ``normalize`` and
    neither phonemizer nor romanizer, it lower-cases the text and drops every character outside
    its vocabulary (``"0"`` becomes no token at all); None for any other tokenizer."""
    if not getattr(tokenizer, "normalize", False) or getattr(tokenizer, "phonemize", False):
        return None
    if getattr(tokenizer, "is_uroman", False):
        return None
    kept = {t for t in tokenizer.get_vocab() if len(t) == 1 and not t.isspace()}
    kept |= {c.upper() for c in kept if c.upper().lower() == c and len(c.upper()) == 1}
    if not kept:
        return None
    points = sorted(ord(c) for c in kept)
    runs: list[list[int]] = []
    for point in points:
        if runs and point == runs[-1][-1] + 1:
            runs[-1].append(point)
        else:
            runs.append([point])

    def char(point: int) -> str:
        c = chr(point)
        return c if c.isalnum() else "\\" + c

    parts = [
        f"{char(run[0])}-{char(run[-1])}" if len(run) > 2 else "".join(map(char, run))
        for run in runs
    ]
    return "[" + "".join(parts) + "]"


class VitsExtras(SegmentExtras):
    """VITS request extras (sentence splitting; see :class:`SegmentExtras`)."""


class VitsPipeline(TransformersSpeechPipeline):
    """``VitsModel`` + its tokenizer. Speed is native (``speaking_rate``: no pitch change).

    Multi-speaker checkpoints (``num_speakers > 1``) offer voices ``speaker-0`` ..
    ``speaker-N``; single-speaker ones offer ``default``. Segment ``i`` is seeded ``seed + i``;
    with ``split_sentences=False`` the output is exactly ``VitsModel(**tokenizer(text))`` after
    ``torch.manual_seed(seed)``.
    """

    extras_model = VitsExtras
    native_speed: ClassVar[bool] = True

    def __init__(self, model: Any, tokenizer: Any, options: PipelineOptions) -> None:
        super().__init__(options)
        self.model = model
        self.tokenizer = tokenizer
        self.sample_rate = int(model.config.sampling_rate)
        # transformers >= 5 takes speaking_rate per call; 4.x reads the module attribute.
        self._rate_kwarg = "speaking_rate" in inspect.signature(model.forward).parameters
        self._speakable = _speakable(tokenizer)
        n = int(getattr(model.config, "num_speakers", 1) or 1)
        self._voices = (
            [Voice(id=f"speaker-{i}", name=f"Speaker {i}") for i in range(n)]
            if n > 1
            else [Voice(id=DEFAULT_VOICE, name="Default")]
        )

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> VitsPipeline:
        from transformers import AutoTokenizer, VitsModel

        model = load_pretrained(VitsModel, path, options)
        tokenizer = AutoTokenizer.from_pretrained(path)
        return cls(model, tokenizer, options)

    def voices(self) -> list[Voice]:
        return list(self._voices)

    def speakable(self) -> str | None:
        return self._speakable

    def _speaker_id(self, voice: str | None) -> int | None:
        if len(self._voices) == 1:
            return None
        return int((voice or self._voices[0].id).rsplit("-", 1)[1])

    def synthesize(self, request: GenerationRequest) -> Iterator[Any]:
        import torch

        seed = request_seed(request)
        speaker = self._speaker_id(request.voice)
        for i, text in enumerate(segments(request, request.extras["split_sentences"])):
            encoded = self.tokenizer(text, return_tensors="pt")
            inputs = {k: v.to(self.device) for k, v in encoded.items() if k in _MODEL_INPUTS}
            if inputs["input_ids"].shape[-1] == 0:
                continue
            kwargs: dict[str, Any] = {}
            if speaker is not None:
                kwargs["speaker_id"] = torch.tensor([speaker], device=self.device)
            with self.seeded(seed + i):  # holds self.lock: the attribute below is ours alone
                if self._rate_kwarg:
                    kwargs["speaking_rate"] = request.speed
                    waveform = self.model(**inputs, **kwargs).waveform
                else:
                    saved = self.model.speaking_rate
                    self.model.speaking_rate = request.speed
                    try:
                        waveform = self.model(**inputs, **kwargs).waveform
                    finally:
                        self.model.speaking_rate = saved
            yield self.to_numpy(waveform)
