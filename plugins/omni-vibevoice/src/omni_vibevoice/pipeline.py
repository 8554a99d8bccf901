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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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

from omni_vibevoice.script import LABEL, SPEAKERS, Script, parse, speakers_in
from omni_vibevoice.stages import VibeVoiceAudio, VibeVoiceDecoder, VibeVoiceDiffusion


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


class VibeVoiceExtras(BaseModel):
    """VibeVoice's own request fields (``generate()``'s options)."""

    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Steps at most (a frame of audio each, 1/7.5 s, or a speech start/end); "
        "default: the generation config's.",
    )


class VibeVoicePipeline(AutoregressiveSpeechPipeline):
    """Text to speech with VibeVoice; requests share the runtime's decode steps."""

    extras_model = VibeVoiceExtras

    #: Frames per chunk (a frame is 1/7.5 s of audio in the official checkpoints).
    schedule = ChunkSchedule(first=2, rest=8)
    #: Positions of one request (prompt + frames) the runtime's cache holds.
    max_len = 4096
    #: Voice prompts: reference audio uploaded (``POST /v1/audio/voices``) or sent as ``ref_audio``.
    clones_voices = True
    #: A script of "Speaker N:" lines, each speaker with a voice (``speakers``).
    max_speakers = len(SPEAKERS)
    #: Its lines open with "Speaker N:" (the WebSocket text stream carries it to each sentence).
    script_label = LABEL

    def speakers_in(
        self, text: str, speakers: Mapping[str, str | ReferenceVoice]
    ) -> dict[str, str | ReferenceVoice]:
        """The speakers of a piece of a script: those whose "Speaker N:" lines it has."""
        return speakers_in(text, speakers)

    def warmup_fields(self) -> dict[str, Any]:
        """A seeded sentence long enough that even random test weights speak a few frames
        ("Hello." can end before the first one, and a warm-up that makes no audio fails)."""
        return {"prompt": "A longer sentence, to speak.", "seed": 0}

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

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        """The shared checks, then the script's: its labels and those ``speakers`` names."""
        request = super().validate(request)
        parse(request.prompt, request.voice, reference=request.reference, speakers=request.speakers)
        return request

    def prompt_ids(self, text: str, voice: str | None) -> torch.Tensor:
        """``[1, T]`` the prompt's token ids, through the checkpoint's chat template."""
        return self.prompt_inputs(text, voice)["input_ids"]

    def prompt_inputs(
        self,
        text: str,
        voice: str | None = None,
        reference: np.ndarray | None = None,
        speakers: dict[str, str | np.ndarray] | None = None,
    ) -> dict[str, torch.Tensor]:
        """The processor's inputs for ``text`` (``input_ids``; with voice prompts, also their
        ``input_values`` and ``padding_mask``), what ``generate()`` takes. ``reference`` is the
        default speaker's voice prompt, ``speakers`` each label's (or the voice it speaks as)."""
        return self.script_inputs(parse(text, voice, reference=reference, speakers=speakers))

    def script_inputs(self, script: Script) -> dict[str, torch.Tensor]:
        """The processor's inputs for a parsed script (its prompts: waves at the model's rate)."""
        conversation = script.conversation()
        if not script.prompts:
            return dict(
                self.processor.apply_chat_template(
                    conversation, tokenize=True, return_dict=True, return_tensors="pt"
                )
            )
        rendered = self.processor.apply_chat_template(conversation, tokenize=False)
        audio = [script.prompts[s] for s in script.prompt_order()]
        return dict(self.processor(text=[rendered], audio=audio, return_tensors="pt"))

    def prepare_voice(self, voice: ReferenceVoice) -> PreparedVoice:
        """A voice prompt: the reference audio, mono at the model's rate (VibeVoice encodes it
        with every request, as its noise is drawn from the request's seed)."""
        if voice.audio is None or not voice.sample_rate:
            raise InvalidRequestError("a voice prompt needs reference audio", param="audio")
        audio = np.asarray(voice.audio, dtype=np.float32).reshape(-1)
        audio = resample(audio, int(voice.sample_rate), self.sample_rate)
        return PreparedVoice(tensors={"audio": torch.from_numpy(np.ascontiguousarray(audio))})

    def _prompt(
        self, request: GenerationRequest, seed: int
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """(prompt embeddings ``[T, hidden]``, its token ids, the torch RNG state after it): a
        voice prompt's acoustic latents draw their noise first, as in ``generate()``."""

        def wave(voice: ReferenceVoice) -> np.ndarray:
            prepared = voice.prepared or self.prepare_voice(voice)
            return prepared.tensors["audio"].numpy()

        reference = None if request.reference is None else wave(request.reference)
        speakers = {
            label: v if isinstance(v, str) else wave(v) for label, v in request.speakers.items()
        }
        script = parse(request.prompt, request.voice, reference=reference, speakers=speakers)
        inputs = self.script_inputs(script)
        ids = inputs["input_ids"].to(self.model.device)
        with self.lock, torch.random.fork_rng(devices=[]), torch.inference_mode():
            torch.manual_seed(seed)
            embeds = self.model.get_input_embeddings()(ids)
            if script.prompts:
                features = self.model.model.get_audio_features(
                    inputs["input_values"].to(self.model.device, self.model.dtype),
                    inputs["padding_mask"].to(self.model.device),
                ).pooler_output
                mask = (ids == self.model.config.audio_token_id)[..., None].expand_as(embeds)
                embeds = embeds.masked_scatter(mask, features.to(embeds.dtype))
            state = torch.get_rng_state()
        return embeds[0], ids, state

    def prepare(self, request: GenerationRequest) -> ARState:
        """A validated request (stripped text, a known voice or None) -> its runtime state."""
        seed = request.seed if request.seed is not None else random.randrange(2**31)
        prompt, ids, rng = self._prompt(request, int(seed))
        generator = torch.Generator()
        generator.set_state(rng)
        data = {
            "prompt": prompt,
            "prompt_last": ids[0, -1],
            "consumed": None,  # what the language model read this step (None: the prompt)
            "negative": "new",  # the guidance branch: "new" (empty) or "running"
            "generator": generator,
            "guidance": float(self.generation.guidance_scale or 1.0),
            "diffusion_steps": int(getattr(self.generation, "num_diffusion_steps", None) or 10),
        }
        frames = request.extras.get("max_new_tokens") or self.generation.max_new_tokens or 1024
        return ARState(request=request, data=data, max_frames=int(frames))
