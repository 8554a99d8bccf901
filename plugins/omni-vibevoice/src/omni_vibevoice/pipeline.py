"""The ``vibevoice`` pipeline: VibeVoice (transformers' classes) on omni's autoregressive runtime.

The plugin writes the stages of one step (``stages.py``) and how a request starts; the core's
runtime owns the loop: requests join and leave between steps, every request in flight shares a
batched step, audio streams out as frames are made. A request's audio equals transformers'
``VibeVoiceForConditionalGeneration.generate()`` run on that request alone with
``torch.manual_seed(seed)`` (the diffusion noise is drawn per request from its own generator,
so it is the same alone or batched).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch
from omni_core import GenerationRequest, ModelNotFoundError, PipelineOptions
from omni_core.speech import (
    ARState,
    AutoregressiveSpeechPipeline,
    ChunkSchedule,
    SpeechStages,
    Voice,
)

from omni_vibevoice.stages import VibeVoiceAudio, VibeVoiceDecoder, VibeVoiceDiffusion

#: VibeVoice speaks a script of up to four speakers ("Speaker 0:" .. "Speaker 3:").
SPEAKERS = ("speaker_0", "speaker_1", "speaker_2", "speaker_3")


def noise_scheduler(generation_config: Any) -> Any:
    """The diffusers scheduler the checkpoint's generation config names (as ``generate()``
    builds it by default)."""
    import diffusers

    name = getattr(generation_config, "noise_scheduler_class", "DPMSolverMultistepScheduler")
    options = getattr(
        generation_config,
        "noise_scheduler_config",
        {"beta_schedule": "squaredcos_cap_v2", "prediction_type": "v_prediction"},
    )
    return getattr(diffusers, name)(**options)


def script(text: str, speaker: int) -> list[dict[str, Any]]:
    """The conversation the processor's chat template formats: one turn of ``speaker``."""
    return [{"role": str(speaker), "content": [{"type": "text", "text": text}]}]


class VibeVoicePipeline(AutoregressiveSpeechPipeline):
    """Text to speech with VibeVoice; requests share the runtime's decode steps."""

    #: Frames per chunk (a frame is 1/7.5 s of audio in the official checkpoints).
    schedule = ChunkSchedule(first=2, rest=8)
    #: Positions of one request (prompt + frames) the runtime's cache holds.
    max_len = 4096

    def __init__(self, model: Any, processor: Any, options: PipelineOptions) -> None:
        super().__init__()
        self.model, self.processor, self.options = model, processor, options
        self.sample_rate = int(processor.feature_extractor.sampling_rate)
        self.generation = model.generation_config
        self.scheduler = noise_scheduler(self.generation)

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> VibeVoicePipeline:
        from transformers import AutoProcessor, VibeVoiceForConditionalGeneration

        if not (Path(path) / "config.json").is_file():
            raise ModelNotFoundError(f"{path} has no config.json")
        model = VibeVoiceForConditionalGeneration.from_pretrained(path, dtype=options.dtype)
        processor = AutoProcessor.from_pretrained(path)
        return cls(model.to(options.device).eval(), processor, options)

    def voices(self) -> list[Voice]:
        return [Voice(id=v, name=f"Speaker {i}", language="en") for i, v in enumerate(SPEAKERS)]

    def stages(self) -> SpeechStages:
        return SpeechStages(
            decoder=VibeVoiceDecoder(self.model, slots=self.max_concurrency, max_len=self.max_len),
            frame_stages=(
                VibeVoiceDiffusion(
                    self.model, self.scheduler, slots=self.max_concurrency, max_len=self.max_len
                ),
            ),
            codec=VibeVoiceAudio(self.sample_rate, self.model.config.audio_config.hop_length),
            schedule=self.schedule,
            max_len=self.max_len,
        )

    def prompt_ids(self, text: str, voice: str | None) -> torch.Tensor:
        """``[1, T]`` the prompt's token ids, through the checkpoint's chat template."""
        speaker = 0 if voice is None else SPEAKERS.index(voice)
        inputs = self.processor.apply_chat_template(
            script(text, speaker), tokenize=True, return_dict=True, return_tensors="pt"
        )
        return inputs["input_ids"]

    def prepare(self, request: GenerationRequest) -> ARState:
        """A validated request (stripped text, a known voice or None) -> its runtime state."""
        ids = self.prompt_ids(request.prompt, request.voice).to(self.model.device)
        with torch.inference_mode():
            prompt = self.model.get_input_embeddings()(ids)[0]
        seed = request.seed if request.seed is not None else random.randrange(2**31)
        data = {
            "prompt": prompt,
            "prompt_last": ids[0, -1],
            "consumed": None,  # what the language model read this step (None: the prompt)
            "negative": "new",  # the guidance branch: "new" (empty) or "running"
            "generator": torch.Generator().manual_seed(int(seed)),
            "guidance": float(self.generation.guidance_scale or 1.0),
            "diffusion_steps": int(getattr(self.generation, "num_diffusion_steps", None) or 10),
        }
        frames = int(self.generation.max_new_tokens or 1024)
        return ARState(request=request, data=data, max_frames=frames)
