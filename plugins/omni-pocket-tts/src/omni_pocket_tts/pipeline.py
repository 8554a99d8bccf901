"""The ``pocket-tts`` pipeline: Kyutai's Pocket TTS (transformers' classes) on omni's
autoregressive runtime.

The plugin writes the step (``stages.py``) and how a request starts; the core's runtime owns
the loop: requests join and leave between steps and every request in flight shares a batched
step. A request's latents and audio equal transformers'
``PocketTTSForConditionalGeneration.generate()`` and ``PocketTTSProcessor.decode`` on that
request alone: greedy (``temperature: 0``) exactly so, sampled after ``torch.manual_seed(seed)``
(its noise is drawn from its own CPU generator seeded so, in ``generate()``'s order: the same
alone or batched, and the draws of torch's global CPU generator that ``generate()`` makes).
"""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from omni_core import (
    GenerationRequest,
    InvalidRequestError,
    ModelNotFoundError,
    PipelineOptions,
)
from omni_core.speech import (
    ARState,
    AutoregressiveSpeechPipeline,
    ChunkSchedule,
    PreparedVoice,
    ReferenceVoice,
    SpeechStages,
    Voice,
    resample,
)
from pydantic import BaseModel, ConfigDict, Field

from omni_pocket_tts.layout import builtin_voices, load_processor, load_voice
from omni_pocket_tts.stages import PocketAudio, PocketDecoder

#: Request numbers: what the decoder stage keys a batch's host facts by.
_REQUESTS = itertools.count()
#: The voice of a checkpoint without built-in voices: the model without a voice prompt.
DEFAULT_VOICE = "default"
#: generate()'s own defaults of its Pocket TTS options (the released checkpoints' values).
DEFAULTS = {"num_flow_steps": 1, "eos_threshold": -4.0, "min_frames_before_eos": 6}


class PocketTTSExtras(BaseModel):
    """Pocket TTS's own request fields (``generate()``'s options)."""

    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int | None = Field(
        None,
        ge=1,
        le=8192,
        description="Frames at most (a latent each, 80 ms in the released checkpoints); "
        "default: generate()'s, (text tokens / 3 + 2) seconds of frames.",
    )
    num_flow_steps: int | None = Field(
        None, ge=1, le=64, description="Euler steps of the flow head per frame (default 1)."
    )
    eos_threshold: float | None = Field(
        None,
        ge=-100.0,
        le=100.0,
        description="End-of-speech logit above which the clip ends (default -4).",
    )
    min_frames_before_eos: int | None = Field(
        None, ge=0, le=8192, description="First frames that cannot end the clip (default 6)."
    )
    frames_after_eos: int | None = Field(
        None,
        ge=0,
        le=64,
        description="Frames made after the end of speech; default: the processor's, by the "
        "text's length (4 for at most 4 words, else 2).",
    )


class PocketTTSPipeline(AutoregressiveSpeechPipeline):
    """Text to speech with Pocket TTS; requests share the runtime's decode steps."""

    extras_model = PocketTTSExtras
    load_options: ClassVar[dict[str, str]] = {
        "first_chunk_frames": "frames in the first streamed chunk (default 2, 160 ms)",
        "chunk_frames": "frames in each later chunk (default 8)",
    }
    #: Voice prompts: reference audio (uploaded, or ``ref_audio``); no transcript is read.
    clones_voices = True

    def __init__(
        self, model: Any, processor: Any, options: PipelineOptions, voices: dict[str, Path]
    ) -> None:
        super().__init__()
        self.model, self.processor, self.options = model, processor, options
        self.codec = processor.audio_tokenizer.to(options.device)
        self.sample_rate = int(processor.feature_extractor.sampling_rate)
        self.generation = model.generation_config
        self.voice_files = voices
        self._voices: dict[str, torch.Tensor] = {}
        config = model.config
        self.max_len = min(int(config.max_position_embeddings), 4096)
        #: The prompt's audio positions (voice and audio), which generate()'s budget does not count.
        self.placeholders = torch.tensor(
            [
                config.audio_prompt_bos_token_id,
                config.audio_prompt_token_id,
                config.audio_bos_token_id,
                config.audio_latent_token_id,
            ]
        )
        extra = options.extra
        self.schedule = ChunkSchedule(
            first=int(extra.get("first_chunk_frames", 2)), rest=int(extra.get("chunk_frames", 8))
        )
        #: A codec that is not causal gives its reference output only when decoded whole.
        self.causal = bool(getattr(self.codec.config, "use_causal_conv", True))

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> PocketTTSPipeline:
        from transformers import PocketTTSForConditionalGeneration

        if not (Path(path) / "config.json").is_file():
            raise ModelNotFoundError(f"{path} has no config.json")
        model = PocketTTSForConditionalGeneration.from_pretrained(
            path, dtype=options.dtype, use_safetensors=True
        )
        model = model.to(options.device).eval()
        return cls(model, load_processor(path), options, builtin_voices(path))

    def voices(self) -> list[Voice]:
        """The checkpoint's built-in voices (the first is the default), else ``default``."""
        if not self.voice_files:
            return [Voice(id=DEFAULT_VOICE, name="Pocket TTS (no voice prompt)")]
        return [Voice(id=name, name=name) for name in self.voice_files]

    def warmup_fields(self) -> dict[str, Any]:
        """A short, bounded clip (random test weights may never end one)."""
        return {"prompt": "Hello.", "seed": 0, "max_new_tokens": 8}

    def stages(self) -> SpeechStages:
        fade = float(getattr(self.processor, "fade_in_duration", 0.0))
        return SpeechStages(
            decoder=PocketDecoder(self.model, slots=self.max_concurrency, max_len=self.max_len),
            codec=PocketAudio(self.codec, fade_in=fade, max_len=self.max_len),
            schedule=self.schedule,
            max_len=self.max_len,
        )

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        """The shared checks, then Pocket TTS's: it samples latents, not tokens."""
        request = super().validate(request)
        for name in ("top_k", "top_p", "guidance_scale"):
            if getattr(request, name) is not None:
                raise InvalidRequestError(
                    f"{name}: Pocket TTS samples continuous latents (only temperature applies)",
                    param=name,
                )
        return request

    def prepare_voice(self, voice: ReferenceVoice) -> PreparedVoice:
        """A voice prompt: the codec's latents of the reference audio, as the processor encodes
        it (mono at the model's rate, ended on a short pause); a transcript is not read."""
        if voice.audio is None or not voice.sample_rate:
            raise InvalidRequestError("a voice prompt needs reference audio", param="audio")
        audio = np.asarray(voice.audio, dtype=np.float32).reshape(-1)
        audio = resample(audio, int(voice.sample_rate), self.sample_rate)
        content = [{"type": "audio", "audio": audio}, {"type": "text", "text": "."}]
        rendered = self.processor.apply_chat_template([{"role": "user", "content": content}])
        with torch.inference_mode():
            inputs = self.processor(
                text=[rendered], audio=[audio], sampling_rate=self.sample_rate, return_tensors="pt"
            )
        frames = int(inputs["audio_prompt_latents_mask"][0].sum())
        latents = inputs["audio_prompt_latents"][0, :frames].float().cpu()
        return PreparedVoice(tensors={"latents": latents})

    def voice_latents(self, name: str) -> torch.Tensor:
        """A built-in voice's latents (read once)."""
        if name not in self._voices:
            self._voices[name] = load_voice(self.voice_files[name])
        return self._voices[name]

    def prompt_inputs(self, text: str, voice: torch.Tensor | None = None) -> dict[str, Any]:
        """What ``generate()`` reads for ``text`` (and a voice's latents): the processor's
        ``input_ids`` through the checkpoint's chat template and its ``frames_after_eos``."""
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        if voice is not None:
            content.insert(0, {"type": "audio", "audio": None})
        rendered = self.processor.apply_chat_template([{"role": "user", "content": content}])
        kwargs: dict[str, Any] = {"text": [rendered], "return_tensors": "pt"}
        if voice is not None:
            kwargs["audio_prompt_latents"] = [voice]
        return dict(self.processor(**kwargs))

    def _voice(self, request: GenerationRequest) -> torch.Tensor | None:
        reference = request.reference
        if reference is not None:
            prepared = reference.prepared or self.prepare_voice(reference)
            return prepared.tensors["latents"]
        name = request.voice or next(iter(self.voice_files), None)
        if name is None or (name == DEFAULT_VOICE and not self.voice_files):
            return None
        return self.voice_latents(name)

    def _option(self, request: GenerationRequest, name: str) -> Any:
        value = request.extras.get(name)
        if value is None:
            value = getattr(self.generation, name, None)
        return DEFAULTS[name] if value is None else value

    def _budget(self, request: GenerationRequest, ids: torch.Tensor) -> int:
        """generate()'s frames: ``max_new_tokens``, else the config's, else the original's
        budget from the text's tokens, ``ceil((tokens / 3 + 2) * frame_rate)``."""
        limit = request.extras.get("max_new_tokens") or self.generation.max_new_tokens
        if limit:
            return int(limit)
        text = int((~torch.isin(ids, self.placeholders)).sum())
        return math.ceil((text / 3 + 2) * self.model.config.frame_rate)

    def _noise(self, seed: int, frames: int) -> torch.Tensor:
        """generate()'s draws after ``torch.manual_seed(seed)``: one ``randn(latent_dim)`` per
        frame, in the model's dtype (drawn at once where that is the same stream)."""
        generator = torch.Generator().manual_seed(seed)
        dim, dtype = self.model.config.latent_dim, self.model.dtype
        if dim % 16 == 0 and dtype == torch.float32:
            # torch's CPU float32 normals are filled 16 at a time: the same values at once
            return torch.randn(frames, dim, generator=generator, dtype=dtype)
        return torch.cat(
            [torch.randn(1, dim, generator=generator, dtype=dtype) for _ in range(frames)]
        )

    def prepare(self, request: GenerationRequest) -> ARState:
        """A validated request -> its runtime state (prompt, budget, end rule, noise)."""
        voice = self._voice(request)
        inputs = self.prompt_inputs(request.prompt, voice)
        ids = inputs["input_ids"].long()
        frames = self._budget(request, ids)
        if not request.extras.get("max_new_tokens"):  # the default, cut to what the cache holds
            frames = min(frames, self.max_len - ids.shape[1])
        if frames < 1 or ids.shape[1] + frames > self.max_len:
            raise InvalidRequestError(
                f"the prompt ({ids.shape[1]} positions) and max_new_tokens ({frames}) need "
                f"{ids.shape[1] + frames} positions; this model holds {self.max_len}",
                param="max_new_tokens",
            )
        config = self.generation
        default = float(config.temperature or 1.0) if config.do_sample else 0.0
        temperature = default if request.temperature is None else float(request.temperature)
        after = request.extras.get("frames_after_eos")
        data: dict[str, Any] = {
            "uid": next(_REQUESTS),
            "input_ids": ids,
            "voice": voice,
            "frame": 0,
            "remaining": -1,
            "frames_after_eos": int(inputs["frames_after_eos"][0]) if after is None else after,
            "min_frames_before_eos": int(self._option(request, "min_frames_before_eos")),
            "eos_threshold": float(self._option(request, "eos_threshold")),
            "num_flow_steps": int(self._option(request, "num_flow_steps")),
            "noise_scale": math.sqrt(temperature),
            "noise": None,
        }
        if temperature > 0:
            seed = request.seed if request.seed is not None else random.randrange(2**31)
            data["noise"] = self._noise(int(seed) % (2**63), frames + 1)
        schedule = ChunkSchedule.whole() if not (request.stream and self.causal) else None
        return ARState(request=request, data=data, max_frames=frames, schedule=schedule)
