"""FastSpeech2Conformer through transformers: non-autoregressive mel + HiFi-GAN, per sentence."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from omni_core import GenerationRequest, PipelineOptions
from omni_core.speech import Voice
from omni_tts.common import (
    DEFAULT_VOICE,
    SegmentExtras,
    TransformersSpeechPipeline,
    find_vocoder,
    load_pretrained,
    segments,
)

_MODEL_INPUTS = ("input_ids", "attention_mask")


class FastSpeech2Extras(SegmentExtras):
    """FastSpeech2 extras (sentence splitting; the model is deterministic, seeds do nothing)."""


class FastSpeech2Pipeline(TransformersSpeechPipeline):
    """``FastSpeech2ConformerModel`` + ``FastSpeech2ConformerHifiGan`` (or the combined
    ``FastSpeech2ConformerWithHifiGan`` checkpoint).

    The separate-model layout looks for the vocoder in ``vocoder/``, the ``vocoder=`` option,
    then ``espnet/fastspeech2_conformer_hifigan``. The espnet tokenizer phonemises with
    ``g2p-en`` (install ``omni-tts[fastspeech2]``). Multi-speaker checkpoints offer voices
    ``speaker-<i>``.
    """

    extras_model = FastSpeech2Extras
    load_options: ClassVar[dict[str, str]] = {
        "vocoder": "folder or Hub id of the vocoder (default: the checkpoint's vocoder/ or "
        "the reference one)",
    }

    def __init__(self, model: Any, vocoder: Any, tokenizer: Any, options: PipelineOptions) -> None:
        super().__init__(options)
        self.model, self.vocoder, self.tokenizer = model, vocoder, tokenizer
        config = vocoder.config if vocoder is not None else model.config.vocoder_config
        self.sample_rate = int(getattr(config, "sampling_rate", 22050))
        acoustic = model.config if vocoder is not None else model.config.model_config
        n = int(getattr(acoustic, "num_speakers", None) or 1)
        self._voices = (
            [Voice(id=f"speaker-{i}", name=f"Speaker {i}") for i in range(n)]
            if n > 1
            else [Voice(id=DEFAULT_VOICE, name="Default")]
        )

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> FastSpeech2Pipeline:
        from transformers import (
            AutoTokenizer,
            FastSpeech2ConformerHifiGan,
            FastSpeech2ConformerModel,
            FastSpeech2ConformerWithHifiGan,
        )

        architectures = json.loads((path / "config.json").read_text()).get("architectures", [])
        tokenizer = AutoTokenizer.from_pretrained(path)
        if "FastSpeech2ConformerWithHifiGan" in architectures:
            model = load_pretrained(FastSpeech2ConformerWithHifiGan, path, options)
            return cls(model, None, tokenizer, options)
        model = load_pretrained(FastSpeech2ConformerModel, path, options)
        vocoder_path = find_vocoder(path, options, "espnet/fastspeech2_conformer_hifigan")
        vocoder = load_pretrained(FastSpeech2ConformerHifiGan, vocoder_path, options)
        return cls(model, vocoder, tokenizer, options)

    def voices(self) -> list[Voice]:
        return list(self._voices)

    def synthesize(self, request: GenerationRequest) -> Iterator[Any]:
        import torch

        kwargs: dict[str, Any] = {}
        if len(self._voices) > 1:
            index = int((request.voice or self._voices[0].id).rsplit("-", 1)[1])
            kwargs["speaker_ids"] = torch.tensor([[index]], device=self.device)
        for text in segments(request, request.extras["split_sentences"]):
            encoded = self.tokenizer(text, return_tensors="pt")
            inputs = {k: v.to(self.device) for k, v in encoded.items() if k in _MODEL_INPUTS}
            with torch.inference_mode():
                if self.vocoder is None:
                    out = self.model(**inputs, **kwargs, return_dict=True)
                    waveform = out.waveform
                else:
                    out = self.model(**inputs, **kwargs, return_dict=True)
                    waveform = self.vocoder(out.spectrogram)
            yield self.to_numpy(waveform)
