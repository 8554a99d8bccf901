"""Qwen3-TTS (CustomVoice, VoiceDesign, Base; 0.6B and 1.7B) as an omni speech pipeline.

One pipeline serves the three kinds of the official checkpoint (``tts_model_type`` in its
``config.json``), on omni's autoregressive runtime (:mod:`.stages`): concurrent requests share
talker and code-predictor steps, audio streams out in deltas as codes arrive.

- CustomVoice: ``voice`` is one of the checkpoint's speakers (``/v1/audio/voices``);
  ``instructions`` steer the style (1.7B; the 0.6B refuses them with a 400).
- VoiceDesign: ``instructions`` describe the voice (required); no named speakers.
- Base: clones a reference voice: ``ref_audio`` (+ ``ref_text``; or ``x_vector_only_mode``) in the
  request, or a voice uploaded with ``POST /v1/audio/voices`` (prepared once, stored).

``language`` is honoured (``auto`` or one the checkpoint lists); bad input is a 400 naming the
field, never ignored. Decoding follows the checkpoint's ``generation_config.json`` (sampling)
unless the request sets ``temperature`` (0: greedy, what the fidelity tests use).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from omni_core import ConfigError, GenerationRequest, InvalidRequestError, PipelineOptions
from omni_core.speech import (
    ARState,
    AutoregressiveSpeechPipeline,
    ChunkSchedule,
    PreparedVoice,
    ReferenceVoice,
    SpeechStages,
    Voice,
)

_TASKS = {
    "customvoice": "custom_voice",
    "custom_voice": "custom_voice",
    "voicedesign": "voice_design",
    "voice_design": "voice_design",
    "base": "base",
}


class Qwen3TTSExtras(BaseModel):
    """Request fields of Qwen3-TTS beyond the shared ones, by vLLM-Omni's names: declaring them
    is what makes the server hand vLLM-Omni's ``task_type``, ``instructions``,
    ``max_new_tokens``, ... to this pipeline (its compat rules are for models that do not);
    ``task_type`` takes vLLM-Omni's spelling and ours (``CustomVoice``, ``custom_voice``)."""

    model_config = ConfigDict(extra="forbid")

    language: str | None = Field(None, max_length=64, description="'Auto' or a listed language.")
    instructions: str | None = Field(None, max_length=4096, description="Style / voice design.")
    task_type: str | None = Field(None, description="CustomVoice, VoiceDesign or Base: checked.")
    x_vector_only_mode: bool = Field(False, description="Base: clone from the speaker embedding.")
    max_new_tokens: int | None = Field(None, ge=2, le=8192, description="Frames at most (+1).")
    repetition_penalty: float | None = Field(None, gt=0.0, le=4.0)
    min_new_tokens: int = Field(2, ge=0, le=8192, description="No end of speech before this.")
    non_streaming_mode: bool | None = Field(None, description="Feed the whole text at prefill.")


def _graphs_mode(value: Any) -> str:
    text = str(value).strip().lower()
    modes = {"on": "on", "true": "on", "1": "on", "off": "off", "false": "off", "0": "off"}
    if text == "static" or text in modes:
        return modes.get(text, "static")
    raise ConfigError(f"cuda_graphs={value!r}: expected on, off or static")


def _switch(name: str, value: Any) -> bool:
    text = str(value).strip().lower()
    if text not in ("on", "true", "1", "off", "false", "0"):
        raise ConfigError(f"{name}={value!r}: expected on or off")
    return text in ("on", "true", "1")


def _fused_mode(value: Any) -> str:
    text = str(value).strip().lower()
    if text in ("off", "eager", "compiled"):
        return text
    raise ConfigError(f"fused_layers={value!r}: expected off, eager or compiled")


def _input_error(exc: Exception) -> InvalidRequestError:
    text = str(exc)
    param = "input"
    for needle, name in (
        ("instruction", "instructions"),
        ("language", "language"),
        ("speaker", "voice"),
        ("reference", "ref_audio"),
        ("ref_text", "ref_text"),
    ):
        if needle in text:
            param = name
            break
    return InvalidRequestError(f"{param}: {text}", param=param)


class Qwen3TTSPipeline(AutoregressiveSpeechPipeline):
    extras_model = Qwen3TTSExtras
    load_options: ClassVar[dict[str, str]] = {
        "first_chunk_frames": "frames in the first streamed chunk (default 2: first audio early)",
        "chunk_frames": "frames in each later chunk (default 8)",
        "max_len": "cache positions per request, prompt + frames (default 4096)",
        "cuda_graphs": "on (default): static decode steps replayed as CUDA graphs on CUDA; "
        "off: the eager stages; static: the static steps without capture",
        "codec_graphs": "on (default): streamed codec chunks at static shapes (CUDA graphs when "
        "cuda_graphs is on; the same samples: every codec stage is causal); off: the codec as "
        "called",
        "fused_layers": "off (default): transformers' Qwen3DecoderLayer calls; eager: each "
        "layer as two pure halves (the same arithmetic); compiled: the halves through "
        "torch.compile on CUDA (fewer kernels per step, ~1.5x faster decode on an H200; rounds "
        "differently, so greedy codes may differ: see sdk-docs' speech page)",
    }

    def __init__(self, model: Any, options: PipelineOptions) -> None:
        super().__init__()
        self.model, self.options = model, options
        self.sample_rate = int(model.sample_rate)
        self.clones_voices = model.kind == "base"
        extra = options.extra
        self.schedule = ChunkSchedule(
            first=int(extra.get("first_chunk_frames", 2)), rest=int(extra.get("chunk_frames", 8))
        )
        self.max_len = int(extra.get("max_len", 4096))
        self.cuda_graphs = _graphs_mode(extra.get("cuda_graphs", "on"))
        self.fused_layers = _fused_mode(extra.get("fused_layers", "off"))
        self.codec_graphs = _switch("codec_graphs", extra.get("codec_graphs", "on"))
        self.fused_report: dict[str, Any] = {"mode": self.fused_layers}
        self._decode: tuple[Any, Any] | None = None
        self._codec: Any = None

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> Qwen3TTSPipeline:
        import torch

        from .model import Qwen3TTSModel

        dtype = options.dtype if options.device.type != "cpu" else torch.float32
        model = Qwen3TTSModel.from_pretrained(path, device=options.device, dtype=dtype)
        return cls(model, options)

    # -- what the server lists and checks -----------------------------------------------------

    def voices(self) -> list[Voice]:
        return [
            Voice(id=name, name=name, description="Qwen3-TTS speaker")
            for name in self.model.speakers
        ]

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        request = super().validate(request)
        extras, kind = request.extras, self.model.kind
        task = extras.get("task_type")
        if task is not None and _TASKS.get(str(task).lower()) != kind:
            raise InvalidRequestError(
                f"task_type={task!r}: this checkpoint is a {kind} model", param="task_type"
            )
        language = extras.get("language")
        if language is not None and language.lower() not in self.model.languages:
            raise InvalidRequestError(
                f"language={language!r}: this model speaks {', '.join(self.model.languages)}",
                param="language",
            )
        if extras.get("instructions") and not self.model.supports_instructions:
            why = "Base models clone a voice" if kind == "base" else "the 0.6B model takes none"
            raise InvalidRequestError(f"instructions: not supported ({why})", param="instructions")
        if kind == "voice_design" and not extras.get("instructions"):
            raise InvalidRequestError(
                "instructions: a VoiceDesign model needs a description of the voice",
                param="instructions",
            )
        if kind == "base" and request.reference is None:
            raise InvalidRequestError(
                "ref_audio: a Base model clones a voice: send ref_audio (+ ref_text) or an "
                "uploaded voice",
                param="ref_audio",
            )
        if kind != "base" and request.reference is not None:
            raise InvalidRequestError(
                f"ref_audio: voice cloning needs a Base model; this one is {kind}",
                param="ref_audio",
            )
        return request

    def warmup_fields(self) -> dict[str, Any]:
        """A short greedy request of this kind (a design for VoiceDesign, a synthetic reference
        voice for Base), at most 8 frames: random-weight checkpoints may never say EOS."""
        import numpy as np

        fields: dict[str, Any] = {"prompt": "Hello.", "temperature": 0, "max_new_tokens": 9}
        if self.model.kind == "voice_design":
            fields["instructions"] = "a clear voice"
        if self.model.kind == "base":
            tone = 0.3 * np.sin(np.linspace(0, 2000, 24000)).astype(np.float32)
            fields["reference"] = ReferenceVoice(audio=tone, sample_rate=24000)
            fields["x_vector_only_mode"] = True
        return fields

    # -- voices -------------------------------------------------------------------------------

    def prepare_voice(self, voice: ReferenceVoice) -> PreparedVoice:
        prompt = self._voice_prompt(voice, x_vector_only=not voice.transcript)
        tensors = {"speaker_embedding": prompt.speaker_embedding}
        if prompt.ref_codes is not None:
            tensors["ref_codes"] = prompt.ref_codes
        return PreparedVoice(tensors=tensors, info={"ref_text": prompt.ref_text})

    def _voice_prompt(self, voice: ReferenceVoice, *, x_vector_only: bool) -> Any:
        import torch

        from .prompt import Qwen3TTSInputError, VoicePrompt

        if voice.prepared is not None:
            tensors, device = voice.prepared.tensors, self.model.device
            codes = tensors.get("ref_codes")
            text = voice.prepared.info.get("ref_text")
            return VoicePrompt(
                speaker_embedding=tensors["speaker_embedding"].to(device, self.model.dtype),
                ref_codes=None if x_vector_only or codes is None else codes.to(device),
                ref_text=None if x_vector_only or codes is None else text,
            )
        if voice.audio is None or voice.sample_rate is None:
            raise InvalidRequestError("ref_audio: no reference audio", param="ref_audio")
        try:
            with torch.inference_mode():
                return self.model.prepare_voice(
                    voice.audio, voice.sample_rate, voice.transcript, x_vector_only=x_vector_only
                )
        except Qwen3TTSInputError as exc:
            raise InvalidRequestError(f"ref_audio: {exc}", param="ref_audio") from None

    # -- the runtime ---------------------------------------------------------------------------

    def stages(self) -> SpeechStages:
        from .codec_graphs import codec_stage
        from .fused import use_fused_layers
        from .graphs import decode_stages

        model = self.model
        self.fused_report = use_fused_layers(model, self.fused_layers)
        decoder, predictor = self._decode = decode_stages(model, self.cuda_graphs)
        codec_mode = self.cuda_graphs if self.codec_graphs else "off"
        codec = self._codec = codec_stage(model, codec_mode, self.schedule, self.max_concurrency)
        return SpeechStages(
            decoder=decoder,
            frame_stages=(predictor,),
            codec=codec,
            schedule=self.schedule,
            max_len=self.max_len,
        )

    def decode_report(self) -> dict[str, Any]:
        """Which decode path ran (``cuda-graphs``, ``static``, ``static (fallback)`` with the
        reason, or ``eager``) and its graph counters, per stage; benchmarks record it."""
        from .codec_graphs import codec_report
        from .graphs import decode_report

        report = decode_report(self.cuda_graphs, self._decode)
        report["codec"] = codec_report(self._codec)
        report["fused_layers"] = self.fused_report
        return report

    def _setting(self, extras: dict[str, Any], name: str, default: Any) -> Any:
        value = extras.get(name)
        return self.model.generation_defaults.get(name, default) if value is None else value

    def prepare(self, request: GenerationRequest) -> ARState:
        import torch

        from .prompt import Qwen3TTSInputError

        extras, model = request.extras, self.model
        voice = None
        if request.reference is not None:
            voice = self._voice_prompt(
                request.reference, x_vector_only=extras["x_vector_only_mode"]
            )
        speaker = request.voice
        if speaker is None and model.kind == "custom_voice":
            speaker = model.speakers[0]
        try:
            prompt = model.build_prompt(
                request.prompt,
                speaker=speaker,
                language=extras.get("language") or "auto",
                instructions=extras.get("instructions"),
                voice=voice,
                non_streaming=extras.get("non_streaming_mode"),
            )
        except Qwen3TTSInputError as exc:
            raise _input_error(exc) from None
        defaults = model.generation_defaults
        temperature = request.temperature  # shared sampling fields: temperature, top_k, top_p
        if temperature is None:
            temperature = defaults.get("temperature", 0.9) if defaults.get("do_sample", True) else 0
        sub_sampling = defaults.get("subtalker_dosample", True)
        device = model.device
        data = {
            "prompt": prompt,
            # keys the sampling noise (stages.sample): a seed gives the same audio in any batch
            "seed": request.seed if request.seed is not None else secrets.randbits(62),
            "made": torch.zeros((), dtype=torch.long, device=device),
            "min_new_tokens": torch.tensor(int(extras["min_new_tokens"]), device=device),
            "repetition_penalty": torch.tensor(
                float(self._setting(extras, "repetition_penalty", 1.05)), device=device
            ),
            "temperature": temperature,
            "top_k": self._setting({"top_k": request.top_k}, "top_k", 50),
            "top_p": self._setting({"top_p": request.top_p}, "top_p", 1.0),
            # the code predictor samples like the talker unless the request is greedy
            "sub_temperature": (
                defaults.get("subtalker_temperature", 0.9)
                if sub_sampling and temperature > 0
                else 0.0
            ),
            "sub_top_k": defaults.get("subtalker_top_k", 50),
            "sub_top_p": defaults.get("subtalker_top_p", 1.0),
        }
        limit = int(self._setting(extras, "max_new_tokens", 2048))
        return ARState(
            request=request,
            data=data,
            max_frames=max(1, limit - 1),  # the official loop stops one short of the budget
            codec_context=prompt.ref_codes,
        )
