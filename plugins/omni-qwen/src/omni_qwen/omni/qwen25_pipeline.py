"""Qwen2.5-Omni as an omni chat pipeline: text, image, audio (and video) in; text and speech out.

transformers' ``Qwen2_5OmniForConditionalGeneration`` (loaded from the official layout) provides
every module; :mod:`.qwen25_stages` drives them on the core's chat runtime, so concurrent answers
share thinker (and talker) decode steps and speech is made while the text is written.

Load options (``--option key=value`` / ``Omni(path, key=value)``):

- ``audio_output``: ``on`` (default when the checkpoint has a talker) or ``off``: load without the
  talker and token2wav (``enable_audio_output=False``); the model then answers text only and a
  request for audio is refused.
- ``talker_max_frames``: codes one spoken answer may have at most (default:
  ``talker_max_new_tokens`` of ``generation_config.json`` when it has one, else 4096,
  transformers' default).
- A non-streamed answer's codes are decoded whole once the talker stops, as transformers does
  (token2wav is not causal). A streamed one (``stream: true``, ``Omni.chat_stream``) is decoded
  in chunks of ``audio_chunk_frames`` codes (default 24; the first of
  ``audio_first_chunk_frames``, default 12) with ``audio_left_context`` codes of left context
  (default 24), so audio comes early but differs from the whole decode (the DiT's noise and its
  look-ahead differ per chunk); ``audio_chunk_frames=0`` decodes streamed answers whole too.
- ``audio_gather_steps``: streamed chunks are decoded only on every n-th talker step (default
  8; 1: as soon as due), so answers that started a few steps apart share one token2wav call (it
  costs about as much for eight rows as for one) instead of one call each; each answer keeps
  its own chunk boundaries, so its audio is what it is alone.
- ``token2wav_steps``: ODE steps of the DiT (default 10, transformers' default).
- ``token2wav_matmul``: ``fp32`` (default: token2wav's float32 matmuls in full float32, as
  transformers runs them) or ``tf32`` (on CUDA, those matmuls on the tensor cores in TF32 while
  token2wav decodes: faster, lossy; its cost against fp32 is measured by
  ``bench/token2wav_profile.py``).
- ``cuda_graphs``: ``on`` (default): on CUDA, token2wav's DiT forward is replayed as CUDA graphs
  per input shape (:mod:`.qwen25_dit_graphs`; a fraction of the launch cost, the waveform
  within 1.5e-4 of the eager forward's on an H200);
  ``off``: transformers' eager forward.
- ``decode_graphs``: the thinker's and talker's decode steps at static shapes over the runtime's
  caches, replayed as CUDA graphs (:mod:`.qwen25_graphs`): ``on`` (default; on CUDA, eager
  elsewhere: on an H200 a thinker step 21.5 -> 6.9 ms, a talker step 18.6 -> 3.7 ms, greedy text
  equal, ``bench/results/omni-chat-graphs-h200.json``), ``static`` (the static steps without
  capture: what the CPU tests check against the eager stages) or ``off`` (the eager stages).
- ``max_len``: positions of one request's thinker cache, prompt + answer (default 8192).

Sampling: ``temperature`` / ``top_p`` / ``top_k`` / ``seed`` of the request drive the thinker
(0 or unset temperature with a greedy ``generation_config.json``: greedy); the talker samples
as transformers' ``generate`` defaults (temperature 0.9, top-k 40, top-p 0.8, repetition penalty
1.05), or greedily with ``talker_sample=off``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from omni_core import ConfigError, GenerationRequest, InvalidRequestError, PipelineOptions
from omni_core.chat import AutoregressiveChatPipeline, TextStages, TextState
from omni_core.runtime import Sampling
from omni_core.speech import ChunkSchedule, Voice

from .load_options import flag
from .messages import to_processor_inputs
from .qwen25_prompt import SYSTEM_PROMPT


class Qwen25OmniPipeline(AutoregressiveChatPipeline):
    """Qwen2.5-Omni (3B / 7B) answers (module doc)."""

    load_options: ClassVar[dict[str, str]] = {
        "audio_output": "on (default): load the talker and token2wav; off: text answers only",
        "enable_audio_output": "the same as audio_output (transformers' config name)",
        "talker_max_frames": "speech codes per answer at most (default: generation_config.json "
        "talker_max_new_tokens, else 4096)",
        "talker_sample": "on (default): the talker samples as transformers does; off: greedy",
        "audio_chunk_frames": "codes per chunk of a streamed answer (default 24; 0: decode "
        "streamed answers whole too; non-streamed ones always are)",
        "audio_first_chunk_frames": "codes in the first streamed chunk (default 12; smaller: "
        "first audio earlier)",
        "audio_left_context": "codes of left context per streamed chunk (default 24)",
        "audio_gather_steps": "decode streamed chunks on every n-th talker step, several "
        "answers' in one token2wav call (default 8; 1: as soon as due)",
        "token2wav_steps": "DiT ODE steps (default 10)",
        "token2wav_matmul": "fp32 (default, as transformers) or tf32 (CUDA tensor cores: "
        "faster, lossy)",
        "cuda_graphs": "on (default): token2wav's DiT replayed as CUDA graphs on CUDA; off: eager",
        "decode_graphs": "on (default): thinker and talker decode steps replayed as CUDA graphs "
        "on CUDA; static: the same static steps uncaptured; off: the eager stages",
        "max_len": "thinker cache positions per request, prompt + answer (default 8192)",
    }

    def __init__(
        self,
        model: Any,
        processor: Any,
        videos: bool,
        options: PipelineOptions,
        generation: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.model, self.processor, self.takes_videos, self.options = (
            model,
            processor,
            videos,
            options,
        )
        extra = options.extra
        self.tokenizer = processor.tokenizer
        self.has_talker = bool(model.has_talker)
        self.output_modalities = ("text", "audio") if self.has_talker else ("text",)
        self.speaker_names = list(model.speaker_map)
        #: generation_config.json (the thinker's eos ids and sampling defaults).
        self.generation = dict(generation or {})
        frames = self.generation.get("talker_max_new_tokens", 4096)
        self.talker_max_frames = int(extra.get("talker_max_frames", frames))
        self.talker_sample = flag("talker_sample", extra.get("talker_sample", "on"))
        self.chunk_frames = int(extra.get("audio_chunk_frames", 24))
        first = int(extra.get("audio_first_chunk_frames", min(12, self.chunk_frames)))
        self.first_chunk_frames = first
        self.left_context = int(extra.get("audio_left_context", 24))
        self.gather_steps = int(extra.get("audio_gather_steps", 8))
        if self.gather_steps < 1:
            raise ConfigError(f"audio_gather_steps={self.gather_steps}: expected >= 1")
        self.token2wav_steps = int(extra.get("token2wav_steps", 10))
        self.token2wav_matmul = str(extra.get("token2wav_matmul", "fp32")).strip().lower()
        if self.token2wav_matmul not in ("fp32", "tf32"):
            raise ConfigError(
                f"token2wav_matmul={extra.get('token2wav_matmul')!r}: expected fp32 or tf32"
            )
        self.cuda_graphs = flag("cuda_graphs", extra.get("cuda_graphs", "on"))
        self.decode_graphs = str(extra.get("decode_graphs", "on")).strip().lower()
        if self.decode_graphs not in ("on", "static", "off"):
            raise ConfigError(
                f"decode_graphs={extra.get('decode_graphs')!r}: expected on, static or off"
            )
        self.max_len = int(extra.get("max_len", 8192))
        eos = self.generation.get("eos_token_id") or [self.tokenizer.eos_token_id]
        self.stop_ids = sorted({int(i) for i in (eos if isinstance(eos, list) else [eos])})

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> Qwen25OmniPipeline:
        import torch

        from .qwen25_loading import load_model, load_processor

        raw = json.loads((path / "config.json").read_text("utf-8"))
        default = options.extra.get("enable_audio_output", raw.get("enable_audio_output", True))
        wanted = options.extra.get("audio_output", default)
        dtype = options.dtype if options.device.type != "cpu" else torch.float32
        model = load_model(
            path, device=options.device, dtype=dtype, audio_output=flag("audio_output", wanted)
        )
        file = path / "generation_config.json"
        generation = json.loads(file.read_text("utf-8")) if file.is_file() else {}
        processor, videos = load_processor(path)
        return cls(model, processor, videos, options, generation)

    # -- what the server lists and checks -----------------------------------------------------

    def voices(self) -> list[Voice]:
        if not self.has_talker:
            return []
        return [Voice(id=n, name=n, description="Qwen2.5-Omni speaker") for n in self.speaker_names]

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        request = super().validate(request)
        if not self.takes_videos and any(
            p.kind == "video" for m in request.messages for p in m.parts
        ):
            raise InvalidRequestError(
                "messages: video parts need torchvision on the server (the Qwen2.5-Omni video "
                "processor uses it)",
                param="messages",
            )
        return request

    # -- the chain ------------------------------------------------------------------------------

    def stages(self) -> TextStages:
        from functools import partial

        from .qwen25_graphs import make_stage
        from .qwen25_stages import TalkerFollower, TalkerStage, ThinkerStage

        thinker = make_stage(
            ThinkerStage, self.decode_graphs, self.model.thinker, self.stop_ids, self.has_talker
        )
        speech = None
        if self.has_talker:
            # streamed answers: chunks with left context; the others (and all of them with
            # audio_chunk_frames=0) get ChunkSchedule.whole() per request (TalkerFollower)
            whole = ChunkSchedule.whole()
            schedule = (
                ChunkSchedule(
                    first=self.first_chunk_frames or 1,
                    rest=self.chunk_frames,
                    gather=self.gather_steps,
                )
                if self.chunk_frames
                else whole
            )
            speakers = [self.model.speaker_map[n] for n in self.speaker_names]
            speech = TalkerFollower(
                self.model,
                speakers,
                schedule,
                steps=self.token2wav_steps,
                left=self.left_context,
                graphs=self.cuda_graphs,
                tf32=self.token2wav_matmul == "tf32",
                talker_stage=partial(make_stage, TalkerStage, self.decode_graphs),
            )

        def detokenize(ids: list[int]) -> str:
            return self.tokenizer.decode(ids, skip_special_tokens=True)

        return TextStages(
            decoder=thinker, detokenize=detokenize, speech=speech, max_len=self.max_len
        )

    def _sampling(self, request: GenerationRequest) -> Sampling:
        greedy_default = not self.generation.get("do_sample", False)
        temperature = request.temperature
        if temperature is None:
            temperature = 0.0 if greedy_default else float(self.generation.get("temperature", 1.0))
        top_p = request.top_p if request.top_p is not None else self.generation.get("top_p", 1.0)
        top_k = request.top_k if request.top_k is not None else self.generation.get("top_k", 0)
        return Sampling(float(temperature), float(top_p), int(top_k or 0), 1.0, request.seed)

    def prepare(self, request: GenerationRequest) -> TextState:
        import torch

        from .qwen25_prompt import build_prompt

        state = TextState(request=request, max_tokens=request.max_tokens or 512)
        state.with_audio = "audio" in request.modalities and self.has_talker
        inputs = to_processor_inputs(
            request.messages,
            system_prompt=SYSTEM_PROMPT,
            sampling_rate=int(self.processor.feature_extractor.sampling_rate),
        )
        speaker = request.voice or ("Chelsie" if "Chelsie" in self.speaker_names else None)
        index = self.speaker_names.index(speaker) if speaker else 0
        with torch.inference_mode():
            prompt = build_prompt(
                self.model, self.processor, inputs, index if state.with_audio else None
            )
        state.data.update(prompt)
        state.data["sampling"] = self._sampling(request)
        state.prompt_tokens = int(prompt["prompt"].shape[0])
        if state.with_audio:
            from .qwen25_stages import TalkerSettings

            talker = (
                Sampling(0.9, 0.8, 40, 1.05, request.seed)
                if self.talker_sample
                else Sampling(0.0, 1.0, 0, 1.05, request.seed)
            )
            state.data["talker_settings"] = TalkerSettings(talker, self.talker_max_frames)
            state.data["speaker_index"] = index
            state.data["noise_seed"] = int(request.seed or 0) % (2**31)
        return state
