"""The ``dia`` pipeline: Dia (transformers' classes) on omni's autoregressive runtime.

The plugin writes the step (``stages.py``) and how a request starts; the core's runtime owns
the loop: requests join and leave between steps and every request in flight shares a batched
step. A greedy request's codes and audio equal transformers'
``DiaForConditionalGeneration.generate(do_sample=False)`` and ``DiaProcessor.batch_decode`` on
that request alone; a sampled one is seeded per request (omni's counter-based sampler: the same
alone or batched, not the draws of torch's global generator).
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from omni_core import (
    ConfigError,
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

from omni_dia.layout import load_processor
from omni_dia.stages import DiaAudio, DiaDecoder, receptive_frames

#: Request numbers: what the decoder stage keys a batch's cross-attention states by.
_REQUESTS = itertools.count()
#: Dia has no built-in speakers: this voice is the model unconditioned on any voice prompt
#: (``[S1]``/``[S2]`` tags in the text pick the dialogue's turns, not a timbre).
DEFAULT_VOICE = "default"


def _graphs_mode(value: Any) -> str:
    text = str(value).strip().lower()
    modes = {"on": "on", "true": "on", "1": "on", "off": "off", "false": "off", "0": "off"}
    if text == "static" or text in modes:
        return modes.get(text, "static")
    raise ConfigError(f"cuda_graphs={value!r}: expected on, off or static")


class DiaExtras(BaseModel):
    """Dia's own request fields (``generate()``'s options)."""

    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int | None = Field(
        None,
        ge=17,
        le=8192,
        description="Decoder positions at most, as generate()'s max_new_tokens (the last 15 "
        "finish the delayed codebooks); default: the generation config's max_length + 15.",
    )


class DiaPipeline(AutoregressiveSpeechPipeline):
    """Text (a ``[S1]``/``[S2]`` dialogue) to speech with Dia; requests share decode steps."""

    extras_model = DiaExtras
    load_options: ClassVar[dict[str, str]] = {
        "first_chunk_frames": "DAC frames in the first streamed chunk (default 8, 93 ms; "
        "handed out after the 15 delay steps and the codec's lookahead)",
        "chunk_frames": "DAC frames in each later chunk (default 32)",
        "cuda_graphs": "on (default): the decode step at static shapes replayed as CUDA graphs "
        "on CUDA (eager elsewhere; a failed capture falls back to the static step eagerly, "
        "reason logged); static: the static step without capture; off: the eager step",
    }
    #: Voice prompts: reference audio and its transcript (uploaded, or ``ref_audio`` +
    #: ``ref_text``), prepended as generate()'s audio prompt.
    clones_voices = True

    def __init__(self, model: Any, processor: Any, options: PipelineOptions) -> None:
        super().__init__()
        self.model, self.processor, self.options = model, processor, options
        self.dac = processor.audio_tokenizer.to(options.device)
        self.sample_rate = int(processor.feature_extractor.sampling_rate)
        self.generation = model.generation_config
        config = model.config
        self.delay = max(config.delay_pattern)
        self.pad = config.decoder_config.pad_token_id
        self.text_limit = config.encoder_config.max_position_embeddings
        longest = max(
            config.decoder_config.max_position_embeddings, self.generation.max_length or 0
        )
        #: DAC frames of right context a streamed chunk waits for (its receptive field).
        self.lookahead = receptive_frames(self.dac.config)
        #: Positions of one request: a voice prompt as long as the default generation, which
        #: generate() counts after the prompt (plus the delays and the lookahead).
        self.max_len = 2 * longest + self.delay + 1 + self.lookahead
        extra = options.extra
        # a request's first delay + lookahead steps hand no frame out yet
        first = self.delay + self.lookahead + int(extra.get("first_chunk_frames", 8))
        self.schedule = ChunkSchedule(first=first, rest=int(extra.get("chunk_frames", 32)))
        self.cuda_graphs = _graphs_mode(extra.get("cuda_graphs", "on"))
        self._decoder: DiaDecoder | None = None

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> DiaPipeline:
        from transformers import DiaForConditionalGeneration

        if not (Path(path) / "config.json").is_file():
            raise ModelNotFoundError(f"{path} has no config.json")
        model = DiaForConditionalGeneration.from_pretrained(
            path, dtype=options.dtype, use_safetensors=True
        )
        return cls(model.to(options.device).eval(), load_processor(path), options)

    @classmethod
    def known_voices(cls) -> list[Voice] | None:
        """Every checkpoint's one voice (``omni voices`` lists it without loading weights)."""
        return [Voice(id=DEFAULT_VOICE, name="Dia (no voice prompt)", language="en")]

    def voices(self) -> list[Voice]:
        return list(self.known_voices() or [])

    def warmup_fields(self) -> dict[str, Any]:
        """A short, bounded clip (random test weights may never end one)."""
        return {"prompt": "[S1] Hello.", "seed": 0, "max_new_tokens": 32}

    def stages(self) -> SpeechStages:
        from omni_dia.graphs import decoder_stage

        channels = self.model.config.decoder_config.num_channels
        self._decoder = decoder_stage(
            self.model,
            self.cuda_graphs,
            slots=self.max_concurrency,
            max_len=self.max_len,
            lookahead=self.lookahead,
        )
        return SpeechStages(
            decoder=self._decoder,
            codec=DiaAudio(self.dac, self.sample_rate, channels=channels, lookahead=self.lookahead),
            schedule=self.schedule,
            max_len=self.max_len,
        )

    def decode_report(self) -> dict[str, Any]:
        """Which decode path ran (``cuda-graphs``, ``static``, ``static (fallback)`` with the
        reason, or ``eager``) and the runner's counters; benchmarks record it."""
        from omni_dia.graphs import decode_report

        return decode_report(self.cuda_graphs, self._decoder)

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        """The shared checks, then Dia's: a voice prompt needs its transcript."""
        request = super().validate(request)
        reference = request.reference
        if reference is not None and reference.prepared is None and not reference.transcript:
            raise InvalidRequestError(
                "Dia clones a voice from its audio and its transcript: send ref_text",
                param="ref_text",
            )
        return request

    def prepare_voice(self, voice: ReferenceVoice) -> PreparedVoice:
        """A voice prompt: the reference's DAC codes with Dia's delay pattern (the processor's
        ``decoder_input_ids``; they depend on the audio alone) and its transcript."""
        if voice.audio is None or not voice.sample_rate:
            raise InvalidRequestError("a voice prompt needs reference audio", param="audio")
        if not voice.transcript:
            raise InvalidRequestError(
                "Dia clones a voice from its audio and its transcript", param="transcript"
            )
        audio = np.asarray(voice.audio, dtype=np.float32).reshape(-1)
        audio = resample(audio, int(voice.sample_rate), self.sample_rate)
        with torch.inference_mode():
            inputs = self.processor(text=[voice.transcript], audio=[audio], return_tensors="pt")
        ids = inputs["decoder_input_ids"][0].long().cpu()
        return PreparedVoice(tensors={"codes": ids}, info={"transcript": voice.transcript.strip()})

    def prompt_inputs(self, text: str, voice: PreparedVoice | None = None) -> dict[str, Any]:
        """What ``generate()`` reads for ``text`` (and a voice prompt): the text ids, prefixed
        by the prompt's transcript, and the delayed decoder ids."""
        if voice is not None:
            text = f"{voice.info['transcript']} {text}"
        inputs = self.processor(text=[text], return_tensors="pt")
        ids = inputs["decoder_input_ids"][0].long() if voice is None else voice.tensors["codes"]
        return {"input_ids": inputs["input_ids"], "decoder_input_ids": ids}

    def _encode(self, input_ids: torch.Tensor) -> dict[str, Any]:
        """The encoder's states of the text and of its unconditioned twin (zeros, as
        generate()'s guidance), and every decoder layer's cross-attention keys and values."""
        ids = input_ids.to(self.model.device)
        with torch.inference_mode():
            states = self.model.model.encoder(
                input_ids=torch.cat([ids, torch.zeros_like(ids)]),
                attention_mask=torch.ones(2, ids.shape[1], dtype=torch.long, device=ids.device),
            ).last_hidden_state
            keys, values = [], []
            for layer in self.model.model.decoder.layers:
                attention = layer.cross_attention
                shape = (2, ids.shape[1], -1, attention.head_dim)
                keys.append(attention.k_proj(states).view(shape).transpose(1, 2))
                values.append(attention.v_proj(states).view(shape).transpose(1, 2))
        return {"encoder": states, "cross_keys": keys, "cross_values": values}

    def _sampling(self, request: GenerationRequest) -> dict[str, Any]:
        """The request's sampling, defaulting to the generation config's (temperature below 1
        is raised to 1 and a top k also filters guidance, as in ``generate()``)."""
        config = self.generation
        default = float(config.temperature or 1.0) if config.do_sample else 0.0
        temperature = default if request.temperature is None else float(request.temperature)
        if 0 < temperature < 1:
            temperature = 1.0
        top_k = int(config.top_k or 0) if request.top_k is None else int(request.top_k)
        top_p = float(config.top_p or 1.0) if request.top_p is None else float(request.top_p)
        guidance = request.guidance_scale
        guidance = float(config.guidance_scale or 1.0) if guidance is None else float(guidance)
        seed = request.seed if request.seed is not None else random.randrange(2**31)
        return {
            "temperature": temperature,
            "top_k": top_k if temperature > 0 else 0,
            "top_p": top_p if temperature > 0 else 1.0,
            "guide_k": top_k,
            "guidance": guidance,
            "seed": int(seed) % (2**62),
        }

    def prepare(self, request: GenerationRequest) -> ARState:
        """A validated request -> its runtime state (prompt, budget, sampling)."""
        reference = request.reference
        voice = None
        if reference is not None:
            voice = reference.prepared or self.prepare_voice(reference)
        inputs = self.prompt_inputs(request.prompt, voice)
        if inputs["input_ids"].shape[1] > self.text_limit:
            raise InvalidRequestError(
                f"the text is {inputs['input_ids'].shape[1]} bytes; Dia reads {self.text_limit}",
                param="input",
            )
        delayed = inputs["decoder_input_ids"]
        valid = int(delayed.shape[0] - (delayed[:, 0] == self.pad).sum())
        forced = torch.full((self.delay + 1, delayed.shape[1]), self.pad, dtype=torch.long)
        forced[: delayed.shape[0] - valid] = delayed[valid:]
        # generate(): max_new_tokens, else the config's max_length plus the delays, after the
        # prompt; that default is cut to what the cache holds after a long voice prompt
        limit = request.extras.get("max_new_tokens") or self.generation.max_new_tokens
        length = valid + int(limit or self.generation.max_length + self.delay)
        if not limit:
            length = min(length, self.max_len - self.lookahead)
        if length + self.lookahead > self.max_len or length - valid <= self.delay + 1:
            raise InvalidRequestError(
                f"the voice prompt and max_new_tokens need {length + self.lookahead} positions; "
                f"this model holds {self.max_len}",
                param="max_new_tokens",
            )
        data = {
            **self._encode(inputs["input_ids"]),
            **self._sampling(request),
            "uid": next(_REQUESTS),
            "prefix": delayed[:valid].to(self.model.device),
            "forced": forced,
            "valid": valid,
            "position": valid,
            "force_at": length - self.delay - 1,  # channel 0 ends here at the latest
        }
        # past the end: the lookahead positions that hand the last frames out
        steps = length - valid + self.lookahead
        schedule = None if request.stream else ChunkSchedule.whole()
        return ARState(request=request, data=data, max_frames=steps, schedule=schedule)
