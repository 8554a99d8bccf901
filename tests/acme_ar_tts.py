"""omni-acme-ar-tts: a tiny third-party autoregressive TTS plugin, written the way an outside
author would write one: it imports only ``omni_core`` top-level names (and torch/transformers).

The model: text bytes are embedded into a prompt; a two-layer transformers ``Qwen3DecoderLayer``
stack (unchanged: it calls the runtime's ``SlotCache`` through transformers' ``Cache`` API)
makes codebook 0 of each frame, a frame stage predicts codebook 1 from the hidden state, and a
causal codec (one frame of left context) turns frames into audio. A request ends at an end code
or after ``len(text) // 2 + 3`` frames (checked on the device), or sooner with its one extra,
``max_frames`` (which also takes vLLM-Omni's name for it, ``max_new_tokens``: an alias of the
extras model is how a plugin declares another server's field as its own).
:func:`reference_generate` is the plain one-request loop (``DynamicCache``, whole-file codec)
the runtime must reproduce.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from pydantic import AliasChoices, BaseModel, ConfigDict, Field
from torch import nn
from transformers import Qwen3Config
from transformers.cache_utils import DynamicCache
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3DecoderLayer,
    Qwen3RMSNorm,
    Qwen3RotaryEmbedding,
)

from omni_core import (
    PLUGIN_API_VERSION,
    GenerationRequest,
    PipelineCapabilities,
    PipelineOptions,
    PipelineSpec,
    hookimpl,
)
from omni_core.runtime import SlotCache
from omni_core.speech import (
    ARState,
    AutoregressiveSpeechPipeline,
    ChunkDecoder,
    ChunkSchedule,
    DecoderStage,
    FrameStage,
    PreparedVoice,
    ReferenceVoice,
    SpeechStages,
    StepOutput,
    Voice,
)

OMNI_PLUGIN_API = PLUGIN_API_VERSION
ARCH = "AcmeARTTS"
CONFIG = {"hidden": 32, "layers": 2, "heads": 4, "kv_heads": 2, "vocab": 12, "codebooks": 2,
          "samples_per_frame": 8, "sample_rate": 16000}  # fmt: skip


class AcmeModel(nn.Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        hidden, vocab = cfg["hidden"], cfg["vocab"]
        self.vocab, self.eos = vocab, vocab  # code `vocab` ends a request
        qcfg = Qwen3Config(
            hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=cfg["layers"],
            num_attention_heads=cfg["heads"], num_key_value_heads=cfg["kv_heads"],
            head_dim=hidden // cfg["heads"], vocab_size=8, max_position_embeddings=512,
        )  # fmt: skip
        qcfg._attn_implementation = "sdpa"
        self.text = nn.Embedding(256 + 1, hidden)  # bytes + a speaker slot
        self.speaker = nn.Linear(4, hidden)
        self.layers = nn.ModuleList(Qwen3DecoderLayer(qcfg, i) for i in range(cfg["layers"]))
        self.rotary = Qwen3RotaryEmbedding(qcfg)
        self.norm = Qwen3RMSNorm(hidden)
        self.head0 = nn.Linear(hidden, vocab + 1)
        self.codes = nn.ModuleList(nn.Embedding(vocab + 1, hidden) for _ in range(2))
        self.head1 = nn.Linear(2 * hidden, vocab)
        spf = cfg["samples_per_frame"]
        self.codec_embed = nn.ModuleList(nn.Embedding(vocab + 1, spf) for _ in range(2))
        self.codec_conv = nn.Conv1d(spf, spf, kernel_size=2)  # causal: one frame of context

    def forward(self, embeds: torch.Tensor, positions: torch.Tensor, mask: Any, cache: Any):
        x = embeds
        rope = self.rotary(x, positions)
        for layer in self.layers:
            out = layer(x, mask, positions, cache, position_embeddings=rope)
            x = out[0] if isinstance(out, tuple) else out
        return self.norm(x)

    def frame_input(self, codes: torch.Tensor) -> torch.Tensor:
        return self.codes[0](codes[:, 0]) + self.codes[1](codes[:, 1].clamp(max=self.vocab - 1))

    def predict1(self, hidden: torch.Tensor, code0: torch.Tensor) -> torch.Tensor:
        return self.head1(torch.cat([hidden, self.codes[0](code0)], -1)).argmax(-1)

    def decode_audio(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, 2, T] -> [B, T * spf]; frame t's audio reads frames t-1 and t."""
        x = self.codec_embed[0](codes[:, 0]) + self.codec_embed[1](codes[:, 1])  # [B, T, spf]
        x = nn.functional.pad(x.transpose(1, 2), (1, 0))
        return torch.tanh(self.codec_conv(x)).transpose(1, 2).reshape(codes.shape[0], -1)


def prompt_of(model: AcmeModel, text: str, speaker: torch.Tensor | None) -> torch.Tensor:
    ids = torch.tensor(list(text.encode("utf-8"))[:200])
    embeds = model.text(ids)
    if speaker is not None:  # a cloned voice: its embedding is the first prompt position
        embeds = torch.cat([model.speaker(speaker)[None], embeds])
    return embeds


def frames_of(text: str) -> int:
    return len(text) // 2 + 3


class AcmeExtras(BaseModel):
    """The request knobs of the acme voice."""

    model_config = ConfigDict(extra="forbid")

    max_frames: int | None = Field(
        None,
        ge=1,
        le=256,
        validation_alias=AliasChoices("max_frames", "max_new_tokens"),
        description="Frames at most (vLLM-Omni's clients call it max_new_tokens).",
    )


# ------------------------------------------------------------------ the stages (the contract)
class AcmeDecoder(DecoderStage):
    def __init__(self, model: AcmeModel) -> None:
        self.model = model

    def _run(self, embeds: torch.Tensor, cache: SlotCache) -> torch.Tensor:
        mask = cache.attention_mask(embeds.dtype)
        return self.model(embeds, cache.position_ids(), mask, cache)[:, -1]

    def _out(self, states: list[ARState], hidden: torch.Tensor) -> StepOutput:
        code0 = self.model.head0(hidden).argmax(-1)
        made = torch.stack([s.data["made"] for s in states])  # frames before this one (device)
        limit = torch.stack([s.data["limit"] for s in states])
        stop = (code0 == self.model.eos) | (made >= limit)
        for state in states:
            state.data["made"] += 1  # stays on the device
        return StepOutput(tokens=code0[:, None], stop=stop, hidden=hidden)

    def prefill(self, states: list[ARState], cache: SlotCache) -> StepOutput:
        hidden = self._run(torch.stack([s.data["prompt"] for s in states]), cache)
        return self._out(states, hidden)

    def decode(self, states: list[ARState], last: StepOutput, cache: SlotCache) -> StepOutput:
        hidden = self._run(self.model.frame_input(last.tokens)[:, None], cache)
        return self._out(states, hidden)


class AcmeCodePredictor(FrameStage):
    def __init__(self, model: AcmeModel) -> None:
        self.model = model

    def run(self, states: list[ARState], out: StepOutput) -> StepOutput:
        assert out.hidden is not None
        code0 = out.tokens[:, 0]
        code1 = self.model.predict1(out.hidden, code0)
        return StepOutput(tokens=torch.stack([code0, code1], 1), stop=out.stop, hidden=out.hidden)


class AcmeCodec(ChunkDecoder):
    left_context = 1
    #: each row is decoded on its own (float64, no noise): seeded requests may share calls
    batches_seeded = True

    def __init__(self, model: AcmeModel, cfg: dict[str, Any]) -> None:
        self.model = model
        self.sample_rate, self.samples_per_frame = cfg["sample_rate"], cfg["samples_per_frame"]

    def decode(self, codes: torch.Tensor, context: int) -> torch.Tensor:
        return self.model.decode_audio(codes)[:, context * self.samples_per_frame :]


class AcmeARTTSPipeline(AutoregressiveSpeechPipeline):
    """The plugin's pipeline: two voices, cloning from reference audio, 3-frame first chunks."""

    clones_voices = True
    extras_model = AcmeExtras
    schedule = ChunkSchedule(first=2, rest=3)

    def __init__(self, model: AcmeModel, cfg: dict[str, Any], options: PipelineOptions) -> None:
        super().__init__()
        self.model, self.cfg, self.options = model, cfg, options
        self.sample_rate = cfg["sample_rate"]

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> AcmeARTTSPipeline:
        from safetensors.torch import load_file

        cfg = {k: v for k, v in json.loads((path / "config.json").read_text()).items()}
        model = AcmeModel(cfg)
        model.load_state_dict(load_file(str(path / "model.safetensors")))
        return cls(model.to(torch.float64).eval(), cfg, options)

    def voices(self) -> list[Voice]:
        return [Voice(id="ada", language="en"), Voice(id="bob", language="en")]

    def stages(self) -> SpeechStages:
        model = self.model
        return SpeechStages(
            decoder=AcmeDecoder(model),
            frame_stages=(AcmeCodePredictor(model),),
            codec=AcmeCodec(model, self.cfg),
            schedule=self.schedule,
            max_len=320,
        )

    def prepare_voice(self, voice: ReferenceVoice) -> PreparedVoice:
        audio = torch.as_tensor(voice.audio, dtype=torch.float64)
        stats = torch.stack([audio.mean(), audio.std(), audio.abs().max(), audio.new_tensor(1.0)])
        return PreparedVoice(tensors={"speaker": stats}, info={"transcript": voice.transcript})

    def prepare(self, request: GenerationRequest) -> ARState:
        speaker = None
        if request.reference is not None:
            prepared = request.reference.prepared or self.prepare_voice(request.reference)
            speaker = prepared.tensors["speaker"].to(torch.float64)
        elif request.voice == "bob":
            speaker = torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64)
        with torch.inference_mode():
            prompt = prompt_of(self.model, request.prompt, speaker)
        limit = frames_of(request.prompt) - 1
        if request.extras["max_frames"] is not None:
            limit = min(limit, request.extras["max_frames"])
        return ARState(
            request=request,
            data={"prompt": prompt, "made": torch.zeros((), dtype=torch.long),
                  "limit": torch.tensor(limit)},
        )  # fmt: skip


# ------------------------------------------------------------------ the plain reference loop
@torch.inference_mode()
def reference_generate(
    pipeline: AcmeARTTSPipeline, text: str, speaker: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One request, DynamicCache, whole-file codec: (codes [2, T], audio [T * spf])."""
    model = pipeline.model
    cache = DynamicCache()
    embeds = prompt_of(model, text, speaker)[None]
    frames: list[torch.Tensor] = []
    position = 0
    for index in range(frames_of(text) + 5):
        length = embeds.shape[1]
        positions = torch.arange(position, position + length)[None]
        causal = torch.ones(length, position + length, dtype=torch.bool).tril(position)
        mask = torch.zeros(causal.shape, dtype=embeds.dtype).masked_fill(~causal, -1e300)
        hidden = model(embeds, positions, mask[None, None], cache)[:, -1]
        position += length
        code0 = model.head0(hidden).argmax(-1)
        if int(code0) == model.eos or index >= frames_of(text) - 1:
            break
        codes = torch.stack([code0, model.predict1(hidden, code0)], 1)
        frames.append(codes[0])
        embeds = model.frame_input(codes)[:, None]
    codes = torch.stack(frames, 1)
    return codes, model.decode_audio(codes[None])[0]


# ------------------------------------------------------------------ packaging
def build_tiny_checkpoint(path: Path, seed: int = 0) -> Path:
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    model = AcmeModel(CONFIG)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"architectures": [ARCH], **CONFIG}))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(path / "model.safetensors"))
    return path


class AcmePlugin:
    @hookimpl
    def omni_register_pipelines(self, register: Callable[[PipelineSpec], None]) -> None:
        register(
            PipelineSpec(
                name="acme-ar-tts",
                implementation=f"{__name__}:AcmeARTTSPipeline",
                tasks=("tts",),
                architectures=(ARCH,),
                capabilities=PipelineCapabilities(streaming=True, step_batching=True),
                description="A tiny autoregressive TTS on omni's autoregressive runtime.",
            )
        )
