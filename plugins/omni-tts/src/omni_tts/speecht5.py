"""SpeechT5 text-to-speech through transformers: ``generate_speech`` + HiFi-GAN, per sentence.

SpeechT5 speaks in the voice of a speaker embedding (an x-vector). Checkpoints on the Hub ship
none, so the pipeline offers deterministic built-in voices and any embeddings you add:

- ``builtin-0`` .. ``builtin-3``: unit-norm vectors drawn from ``torch.Generator`` seeded
  ``1000 + i`` (the same on every machine). On the real checkpoint they are plausible but
  arbitrary voices; add real x-vectors for known speakers.
- every ``<name>.npy`` / ``<name>.safetensors`` (tensor ``speaker_embedding``) in the
  checkpoint's ``speaker_embeddings/`` folder, or in the folder given as the pipeline option
  ``speaker_embeddings=PATH``, becomes voice ``<name>``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from omni_core import ConfigError, GenerationRequest, PipelineOptions
from omni_core.speech import Voice
from omni_tts.common import (
    SegmentExtras,
    TransformersSpeechPipeline,
    find_vocoder,
    load_pretrained,
    request_seed,
    segments,
)

BUILTIN_VOICES = 4


class SpeechT5Extras(SegmentExtras):
    """SpeechT5 extras: transformers' ``generate_speech`` stopping knobs."""

    threshold: float = Field(0.5, gt=0.0, lt=1.0, description="Stop-token probability.")
    maxlenratio: float = Field(20.0, gt=0.0, le=100.0, description="Max frames per input token.")


def builtin_embedding(index: int, dim: int) -> Any:
    """The deterministic built-in speaker embedding ``builtin-<index>``."""
    import torch

    gen = torch.Generator("cpu").manual_seed(1000 + index)
    vec = torch.randn(dim, generator=gen)
    return vec / vec.norm()


def load_embeddings(folder: Path, dim: int) -> dict[str, Any]:
    """Speaker embeddings found in ``folder`` (``.npy`` or ``.safetensors``), by file stem."""
    import numpy as np
    import torch

    found: dict[str, Any] = {}
    if not folder.is_dir():
        return found
    for file in sorted(folder.iterdir()):
        if file.suffix == ".npy":
            vec = torch.from_numpy(np.load(file, allow_pickle=False)).float().reshape(-1)
        elif file.suffix == ".safetensors":
            from safetensors.torch import load_file

            vec = load_file(str(file))["speaker_embedding"].float().reshape(-1)
        else:
            continue
        if vec.numel() != dim:
            raise ConfigError(f"{file}: speaker embedding has {vec.numel()} values, need {dim}")
        found[file.stem] = vec
    return found


class SpeechT5Pipeline(TransformersSpeechPipeline):
    """``SpeechT5ForTextToSpeech`` + ``SpeechT5HifiGan``, one ``generate_speech`` per sentence.

    With ``split_sentences=False`` the result equals
    ``model.generate_speech(input_ids, embedding, vocoder=vocoder)`` after
    ``torch.manual_seed(seed)`` (the decoder prenet's dropout draws from the RNG).
    """

    extras_model = SpeechT5Extras
    load_options: ClassVar[dict[str, str]] = {
        "vocoder": "folder or Hub id of the vocoder (default: the checkpoint's vocoder/ or "
        "the reference one)",
        "speaker_embeddings": "a .npy/.safetensors file or folder of x-vector voices",
    }

    def __init__(
        self, model: Any, vocoder: Any, tokenizer: Any, embeddings: dict[str, Any], options: Any
    ) -> None:
        super().__init__(options)
        self.model, self.vocoder, self.tokenizer = model, vocoder, tokenizer
        self.embeddings = {k: v.to(self.device, self.dtype) for k, v in embeddings.items()}
        self.sample_rate = int(getattr(vocoder.config, "sampling_rate", 16000))

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> SpeechT5Pipeline:
        from transformers import AutoTokenizer, SpeechT5ForTextToSpeech, SpeechT5HifiGan

        model = load_pretrained(SpeechT5ForTextToSpeech, path, options)
        vocoder_path = find_vocoder(path, options, "microsoft/speecht5_hifigan")
        vocoder = load_pretrained(SpeechT5HifiGan, vocoder_path, options)
        tokenizer = AutoTokenizer.from_pretrained(path)
        dim = int(model.config.speaker_embedding_dim)
        embeddings = {f"builtin-{i}": builtin_embedding(i, dim) for i in range(BUILTIN_VOICES)}
        embeddings.update(load_embeddings(path / "speaker_embeddings", dim))
        extra = options.extra.get("speaker_embeddings")
        if extra:
            embeddings.update(load_embeddings(Path(extra), dim))
        return cls(model, vocoder, tokenizer, embeddings, options)

    @classmethod
    def known_voices(cls) -> list[Voice] | None:
        """The built-in voices (checkpoints may add more from speaker_embeddings/)."""
        return [
            Voice(
                id=f"builtin-{i}",
                name=f"builtin-{i}",
                description="built-in deterministic embedding",
            )
            for i in range(BUILTIN_VOICES)
        ]

    def voices(self) -> list[Voice]:
        return [
            Voice(
                id=name,
                name=name,
                description="built-in deterministic embedding"
                if name.startswith("builtin-")
                else "speaker embedding from file",
            )
            for name in self.embeddings
        ]

    def synthesize(self, request: GenerationRequest) -> Iterator[Any]:
        seed = request_seed(request)
        voice = request.voice or next(iter(self.embeddings))
        embedding = self.embeddings[voice][None]
        extras = request.extras
        for i, text in enumerate(segments(request, extras["split_sentences"])):
            ids = self.tokenizer(text, return_tensors="pt")["input_ids"].to(self.device)
            with self.seeded(seed + i):
                waveform = self.model.generate_speech(
                    ids,
                    embedding,
                    threshold=extras["threshold"],
                    maxlenratio=extras["maxlenratio"],
                    vocoder=self.vocoder,
                )
            yield self.to_numpy(waveform)
