"""Qwen3-Omni (``Qwen3OmniMoeForConditionalGeneration``) as an omni chat pipeline.

Text, images, audio (and video, where torchvision is installed) in; text, and speech in one of
the checkpoint's speakers, out, on the core's chat runtime: the thinker's decode steps are
batched across requests (:mod:`.qwen3_thinker`), the talker speaks each answer while it is
written and its audio streams as code chunks are decoded (:mod:`.qwen3_talker`).

The model, its configs and its modules are transformers' own, loaded with
``from_pretrained`` from the official layout (safetensors), straight onto the device
(``device_map``: each shard is read into device memory, no host copy of the ~70 GB model, and
transformers fuses the MoE experts there). ``audio_output=false`` (default:
the checkpoint's ``enable_audio_output``) loads the thinker only (no talker, no code2wav): the
model then answers text, and a request for audio is refused with a 400.

Decoding: the thinker follows the request (``temperature`` 0: greedy) or the checkpoint's
``generation_config.json``; the talker uses ``generate()``'s talker defaults (temperature
0.9, top-k 50, repetition penalty 1.05; its code predictor top-k 50, top-p 0.8), and is greedy
too when the request is (``temperature: 0``), which is what the fidelity tests compare
against ``generate(do_sample=False, talker_do_sample=False)``. Seeds are per request and
independent of the batch.

``decode_graphs`` (``on`` default, ``static``, ``off``) picks the decode stages: the thinker's
and talker's decode steps at static shapes over the runtime's slot caches
(:mod:`.qwen3_thinker_graphs`, :mod:`.qwen3_talker_graphs`) and the code predictor's frame loop
(:mod:`.qwen3_graphs`), replayed as CUDA graphs on CUDA (``on``), run uncaptured (``static``:
what the CPU tests compare with the eager stages) or the eager stages (``off``; ``on`` off
CUDA). Each graphed stage's ``report()`` gives its path and graph counters.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from omni_core import ConfigError, GenerationRequest, InvalidRequestError, PipelineOptions
from omni_core.chat import AutoregressiveChatPipeline, ChatMessage, TextStages, TextState
from omni_core.runtime import Sampling
from omni_core.speech import ChunkSchedule, Voice

from .load_options import flag, integer

#: ``generate()``'s defaults for the answer and the talker.
MAX_TOKENS = 1024
TALKER = {"temperature": 0.9, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.05}
PREDICTOR = {"temperature": 1.0, "top_k": 50, "top_p": 0.8}


def prompt_roles(ids: list[int], im_start: int, user: int, assistant: int) -> tuple[list[int], int]:
    """The positions of the user turns (a position belongs to the role named right after the
    last ``<|im_start|>`` before it, as ``generate()`` reads it) and the index of the last
    ``<|im_start|>assistant`` (the generation prompt)."""
    last, positions, start = 0, [], -1
    for i, token in enumerate(ids):
        if token == im_start:
            last = i
            if i + 1 < len(ids) and ids[i + 1] == assistant:
                start = i
        if ids[min(last + 1, len(ids) - 1)] == user:
            positions.append(i)
    return positions, start


class Qwen3OmniPipeline(AutoregressiveChatPipeline):
    load_options: ClassVar[dict[str, str]] = {
        "audio_output": "true (default: the config's enable_audio_output): load the talker and "
        "code2wav; false: the thinker only, text answers",
        "enable_audio_output": "the same as audio_output (transformers' config name)",
        "max_len": "cache positions per request: prompt + answer, and the talker's (default 8192)",
        "first_chunk_frames": "audio frames in the first streamed chunk (default 4)",
        "chunk_frames": "audio frames in each later chunk (default 12)",
        "left_context": "frames of left context per code2wav chunk (default 25, as "
        "transformers' chunked_decode; at least 1)",
        "max_audio_frames": "speech frames per answer at most (default 4095, generate()'s)",
        "decode_graphs": "on (default): the thinker's and talker's decode steps (static shapes "
        "over the slot caches, MoE experts switched to a capturable implementation) and the code "
        "predictor's 15-forward frame loop replayed as CUDA graphs per batch bucket on CUDA "
        "(eager elsewhere); static: the same static steps uncaptured; off: the eager stages",
        "experts": "the MoE experts implementation of the thinker and talker, by transformers' "
        "name (grouped_mm, batched_mm, eager; default: the loaded one, switched to a capturable "
        "one under decode_graphs=on)",
        "fused_norms": "off (default): transformers' own RMSNorm forward; on: torch's fused "
        "rms_norm and the weight's multiply (two kernels instead of eight in bfloat16, the same "
        "formula in another float32 reduction order: bfloat16 answers may round differently "
        "from transformers'; see omni_qwen.omni.fused_norms)",
    }

    def __init__(
        self, model: Any, processor: Any, videos: bool, options: PipelineOptions, path: Path
    ) -> None:
        super().__init__()
        self.model, self.processor, self.options = model, processor, options
        self.takes_videos = videos
        extra = options.extra
        self.audio = bool(model.has_talker)
        self.output_modalities = ("text", "audio") if self.audio else ("text",)
        self.max_len = integer(extra, "max_len", 8192, 64)
        self.schedule = ChunkSchedule(
            first=integer(extra, "first_chunk_frames", 4, 1),
            rest=integer(extra, "chunk_frames", 12, 1),
        )
        # at least one frame: a chunk's last samples need the next one (see .qwen3_talker)
        self.left_context = integer(extra, "left_context", 25, 1)
        self.max_audio_frames = integer(extra, "max_audio_frames", 4095, 1)
        self.decode_graphs = str(extra.get("decode_graphs", "on")).strip().lower()
        if self.decode_graphs not in ("on", "static", "off"):
            raise ConfigError(
                f"decode_graphs={extra.get('decode_graphs')!r}: expected on, static or off"
            )
        if "experts" in extra:
            self._set_experts(str(extra["experts"]).strip())
        from .fused_norms import set_fused_rms_norms

        fused = flag("fused_norms", extra.get("fused_norms", "off"))
        self.fused_norms = set_fused_rms_norms(model, fused)
        config = model.config
        tc_speakers = config.talker_config.speaker_id if self.audio else {}
        # lower-case names, as generate() looks them up
        self.speakers = {str(k).lower(): int(v) for k, v in (tc_speakers or {}).items()}
        self.sample_rate = 24000
        self.ids = {
            "im_start": int(config.im_start_token_id),
            "user": int(config.user_token_id),
            "assistant": int(config.assistant_token_id),
        }
        self.defaults = self._generation_defaults(path)

    def _set_experts(self, name: str) -> None:
        """The ``experts`` load option: transformers' ``set_experts_implementation`` on the
        whole model (thinker and talker), a ConfigError naming the key when it is refused."""
        try:
            self.model.set_experts_implementation(name)
        except (ValueError, ImportError, KeyError, RuntimeError) as exc:
            raise ConfigError(f"experts={name!r}: {exc}") from exc

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> Qwen3OmniPipeline:
        import torch
        from transformers import Qwen3OmniMoeForConditionalGeneration

        from .qwen3_prompt import load_processor

        path = Path(path)
        raw = json.loads((path / "config.json").read_text(encoding="utf-8"))
        extra = options.extra
        default = extra.get("enable_audio_output", raw.get("enable_audio_output", True))
        wanted = extra.get("audio_output", default)
        dtype = options.dtype if options.device.type != "cpu" else torch.float32
        model = Qwen3OmniMoeForConditionalGeneration.from_pretrained(
            path,
            dtype=dtype,
            enable_audio_output=flag("audio_output", wanted),
            use_safetensors=True,
            device_map={"": options.device},  # shards straight onto the device (module doc)
        )
        model = model.eval().requires_grad_(False)
        processor, videos = load_processor(path)
        return cls(model, processor, videos, options, path)

    @staticmethod
    def _generation_defaults(path: Path) -> dict[str, Any]:
        """The thinker's sampling settings of ``generation_config.json`` (greedy without one)."""
        file = path / "generation_config.json"
        raw = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
        sampled = bool(raw.get("do_sample", False))
        eos = raw.get("eos_token_id")
        return {
            "temperature": float(raw.get("temperature", 1.0)) if sampled else 0.0,
            "top_p": float(raw.get("top_p", 1.0)),
            "top_k": int(raw.get("top_k", 0) or 0),
            "repetition_penalty": float(raw.get("repetition_penalty", 1.0)),
            "eos": [eos] if isinstance(eos, int) else list(eos or []),
        }

    # -- what the server lists and checks -----------------------------------------------------

    def voices(self) -> list[Voice]:
        if not self.audio:
            return []
        return [
            Voice(id=n, name=n.title(), description="Qwen3-Omni speaker") for n in self.speakers
        ]

    def validate(self, request: GenerationRequest) -> GenerationRequest:
        if request.voice:
            request = request.model_copy(update={"voice": request.voice.lower()})
        return super().validate(request)

    def warmup_fields(self) -> dict[str, Any]:
        return {
            "messages": [ChatMessage.text("user", "Hello.")],
            "max_tokens": 2,
            "temperature": 0.0,
        }

    # -- the chain ----------------------------------------------------------------------------

    def stop_ids(self) -> list[int]:
        """The tokens that end an answer: ``<|im_end|>`` (``generate()``'s default) and the
        checkpoint's ``eos_token_id``."""
        return sorted({int(self.model.config.im_end_token_id), *map(int, self.defaults["eos"])})

    def stages(self) -> TextStages:
        from .qwen3_talker import TalkerFollower
        from .qwen3_talker_graphs import make_talker_stage
        from .qwen3_thinker_graphs import make_thinker_stage

        speech = None
        if self.audio:
            speech = TalkerFollower(
                self.model,
                schedule=self.schedule,
                left_context=self.left_context,
                max_len=self.max_len,
                decode_graphs=self.decode_graphs,
                talker_stage=make_talker_stage(self.decode_graphs, self.options.device),
            )
        tokenizer = self.processor.tokenizer
        return TextStages(
            decoder=make_thinker_stage(
                self.decode_graphs, self.model, self.stop_ids(), follow=self.audio
            ),
            detokenize=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
            speech=speech,
            max_len=self.max_len,
        )

    def _samplings(self, request: GenerationRequest) -> tuple[Sampling, Sampling, Sampling]:
        d = self.defaults
        temperature = d["temperature"] if request.temperature is None else request.temperature
        thinker = Sampling(
            temperature=float(temperature),
            top_p=d["top_p"] if request.top_p is None else float(request.top_p),
            top_k=d["top_k"] if request.top_k is None else int(request.top_k),
            repetition_penalty=d["repetition_penalty"],
            seed=request.seed,
        ).seeded()
        seed = int(thinker.seed or 0)
        greedy = request.temperature == 0
        talker = Sampling(
            temperature=0.0 if greedy else TALKER["temperature"],
            top_p=TALKER["top_p"],
            top_k=TALKER["top_k"],
            repetition_penalty=TALKER["repetition_penalty"],
            seed=(seed + 1) % 2**31,
        )
        predictor = Sampling(
            temperature=0.0 if greedy else PREDICTOR["temperature"],
            top_p=PREDICTOR["top_p"],
            top_k=PREDICTOR["top_k"],
            seed=(seed + 2) % 2**31,
        )
        return thinker, talker, predictor

    def prepare(self, request: GenerationRequest) -> TextState:
        from .qwen3_prompt import encode

        inputs = encode(self.processor, list(request.messages), videos=self.takes_videos)
        ids = inputs["input_ids"][0].tolist()
        thinker, talker, predictor = self._samplings(request)
        with_audio = "audio" in request.modalities and self.audio
        data: dict[str, Any] = {"inputs": inputs, "sampling": thinker}
        if with_audio:
            import torch

            users, start = prompt_roles(
                ids, self.ids["im_start"], self.ids["user"], self.ids["assistant"]
            )
            if start < 0 or start + 3 > len(ids):
                raise InvalidRequestError(
                    "messages: the prompt has no assistant turn to answer in", param="messages"
                )
            voice = request.voice or (
                "ethan" if "ethan" in self.speakers else next(iter(self.speakers))
            )
            data.update(
                user_positions=torch.tensor(users, dtype=torch.long),
                assistant_start=start,
                speaker_id=self.speakers[voice],
                talker_sampling=talker,
                predictor_sampling=predictor,
                max_frames=self.max_audio_frames,
            )
        return TextState(
            request=request,
            data=data,
            max_tokens=int(request.max_tokens or MAX_TOKENS),
            with_audio=with_audio,
            prompt_tokens=len(ids),
        )
