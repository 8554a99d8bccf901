"""omni-acme-chat: a tiny third-party chat plugin, written the way an outside author would write
one: it imports only ``omni_core`` top-level names (and torch/transformers/tokenizers).

The checkpoint is a transformers ``Qwen2ForCausalLM`` folder (``config.json``,
``model.safetensors``, a byte-level BPE ``tokenizer.json`` with a ChatML chat template), built
in-process with random weights; an optional ``talker/`` folder makes it an omni model that also
speaks its answers: a second tiny Qwen2 decoder reads the thinker's reply buffer (frame ``f``
reads the thinker's hidden state of token ``f``, plus the voice's embedding) and
makes one code per frame; a random transposed convolution turns codes into 16 kHz audio.

The thinker reads text only; media parts reach it as a caption of what was decoded
(``[image 32x24]``, ``[audio 1.00 s at 16000 Hz]``, ``[video 8x32x24 at 4 fps]``), so tests see
through ``usage.prompt_tokens`` and the greedy answer what the server decoded.
:func:`reference_answer` is the plain one-request loop (transformers ``generate``, a
``DynamicCache`` talker, the whole-file codec) the runtime must reproduce.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from transformers.cache_utils import DynamicCache

from omni_core import (
    PLUGIN_API_VERSION,
    GenerationRequest,
    PipelineCapabilities,
    PipelineOptions,
    PipelineSpec,
    hookimpl,
)
from omni_core.chat import (
    AutoregressiveChatPipeline,
    ChatMessage,
    ChatPart,
    ReplyBuffer,
    SpeechFollower,
    TextStage,
    TextStages,
    TextState,
    TokenOutput,
)
from omni_core.runtime import Sampling, SlotCache, sample_tokens
from omni_core.speech import (
    ARState,
    ChunkDecoder,
    ChunkSchedule,
    DecoderStage,
    SpeechStages,
    StepOutput,
    Voice,
)

OMNI_PLUGIN_API = PLUGIN_API_VERSION
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CODES, SAMPLES_PER_FRAME, SAMPLE_RATE = 64, 400, 16000
VOICES = {"ada": 0, "bob": 1}
MAX_TOKENS = 24


def _qwen2(vocab: int, **extra: Any) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        **extra,
    )


def caption(part: ChatPart) -> str:
    """What the text-only thinker reads for a part."""
    if part.kind == "text":
        return part.text or ""
    if part.kind == "image":
        return f"[image {part.image.width}x{part.image.height}]"
    if part.kind == "audio":
        return f"[audio {len(part.audio) / part.sample_rate:.2f} s at {part.sample_rate} Hz]"
    frames, height, width = part.video.shape[:3]
    sound = (
        f" with {len(part.audio) / part.sample_rate:.2f} s of sound"
        if part.audio is not None
        else ""
    )
    return f"[video {frames}x{width}x{height} at {part.fps:.3g} fps{sound}]"


def conversation(messages: list[ChatMessage]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": "".join(caption(p) for p in m.parts)} for m in messages]


# ------------------------------------------------------------------ the talker and its codec
class Talker(torch.nn.Module):
    """Reply entries -> one code per frame (a Qwen2 decoder), codes -> audio (a transposed conv)."""

    def __init__(self, lm: Qwen2ForCausalLM) -> None:
        super().__init__()
        self.lm = lm
        self.bridge = torch.nn.Linear(32, 32)
        self.special = torch.nn.Parameter(torch.randn(3, 32))  # 1: the text's end, 2: past it
        self.voices = torch.nn.Parameter(torch.randn(len(VOICES), 32))
        self.embed = torch.nn.Embedding(CODES, 8)
        self.up = torch.nn.ConvTranspose1d(
            8, 1, kernel_size=SAMPLES_PER_FRAME, stride=SAMPLES_PER_FRAME
        )

    def feed(self, values: torch.Tensor, where: torch.Tensor, voice: torch.Tensor) -> torch.Tensor:
        """One frame's input from its reply entry, in the voice (an index per row)."""
        entry = torch.where((where == 0).unsqueeze(-1), self.bridge(values), self.special[where])
        return entry + self.voices[voice]

    def codes(self, embeds: torch.Tensor, positions: torch.Tensor, mask: Any, cache: Any):
        out = self.lm.model(
            inputs_embeds=embeds, position_ids=positions, attention_mask=mask, cache=cache
        )
        return self.lm.lm_head(out.last_hidden_state[:, -1]).argmax(-1)

    def audio(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [rows, frames] -> [rows, frames * SAMPLES_PER_FRAME]."""
        return torch.tanh(self.up(self.embed(codes).transpose(1, 2)))[:, 0]


class AcmeTalkerStage(DecoderStage):
    def __init__(self, talker: Talker, reply: ReplyBuffer) -> None:
        self.talker, self.reply = talker, reply

    def _run(self, embeds: torch.Tensor, where: torch.Tensor, cache: SlotCache) -> StepOutput:
        mask = cache.attention_mask(embeds.dtype)
        codes = self.talker.codes(embeds, cache.position_ids(), mask, cache)
        return StepOutput(tokens=codes.view(-1, 1), stop=where == 2)

    def prefill(self, states: list[ARState], cache: SlotCache) -> StepOutput:
        values, where = self.reply.read([s.data["slot"] for s in states], [0] * len(states))
        voice = torch.tensor([s.data["voice"] for s in states])
        embeds = torch.stack([self.talker.voices[voice], self.talker.feed(values, where, voice)], 1)
        return self._run(embeds, where, cache)

    def decode(self, states: list[ARState], last: StepOutput, cache: SlotCache) -> StepOutput:
        slots, frames = [s.data["slot"] for s in states], [s.frames for s in states]
        values, where = self.reply.read(slots, frames)
        feed = self.talker.feed(values, where, torch.tensor([s.data["voice"] for s in states]))
        embeds = self.talker.lm.model.embed_tokens(last.tokens[:, 0]) + feed
        return self._run(embeds.unsqueeze(1), where, cache)

    def prompt_length(self, state: ARState) -> int:
        return 2


class AcmeCodec(ChunkDecoder):
    sample_rate, samples_per_frame, left_context = SAMPLE_RATE, SAMPLES_PER_FRAME, 0

    def __init__(self, talker: Talker) -> None:
        self.talker = talker

    def decode(self, codes: torch.Tensor, context: int) -> torch.Tensor:
        return self.talker.audio(codes[:, 0])


class AcmeFollower(SpeechFollower):
    lead = 2

    def __init__(self, talker: Talker) -> None:
        self.talker = talker

    def stages(self, reply: ReplyBuffer) -> SpeechStages:
        return SpeechStages(
            decoder=AcmeTalkerStage(self.talker, reply),
            codec=AcmeCodec(self.talker),
            schedule=ChunkSchedule(first=2, rest=4),
            max_len=1024,
        )

    def prepare(self, state: TextState) -> ARState:
        voice = VOICES[state.request.voice or "ada"]
        return ARState(
            request=state.request,
            data={"slot": state.slot, "voice": voice},
            max_frames=state.max_tokens + 2,
        )


# ------------------------------------------------------------------ the thinker (the contract)
class AcmeThinker(TextStage):
    def __init__(self, lm: Qwen2ForCausalLM, stops: list[int]) -> None:
        self.lm, self.stops = lm, torch.tensor(stops)

    def _run(self, states: list[TextState], ids: torch.Tensor, cache: SlotCache) -> TokenOutput:
        """One forward on the runtime's cache: each row's token, stop flag and hidden state."""
        mask, positions = cache.attention_mask(torch.float32), cache.position_ids()
        last = self.lm.model(ids, mask, positions, cache).last_hidden_state[:, -1]
        steps = [s.tokens for s in states]
        made = sample_tokens(self.lm.lm_head(last), [s.data["sampling"] for s in states], steps)
        stop = torch.isin(made, self.stops.to(made.device))
        return TokenOutput(tokens=made, stop=stop, follow=last)

    def prefill(self, states: list[TextState], cache: SlotCache) -> TokenOutput:
        return self._run(states, torch.stack([s.data["prompt"] for s in states]), cache)

    def decode(self, states: list[TextState], last: TokenOutput, cache: SlotCache) -> TokenOutput:
        return self._run(states, last.tokens.view(-1, 1), cache)


class AcmeChatPipeline(AutoregressiveChatPipeline):
    """A Qwen2 chat model; with a ``talker/`` folder (and ``enable_audio_output`` left on) it
    also speaks, in the voices ``ada`` and ``bob``."""

    max_concurrency = 8
    load_options: ClassVar[dict[str, str]] = {
        "enable_audio_output": "false: load without the talker (text answers only)"
    }

    def __init__(self, lm: Any, tokenizer: Any, talker: Talker | None, options: Any) -> None:
        super().__init__()
        self.lm, self.tokenizer, self.talker, self.options = lm, tokenizer, talker, options
        self.output_modalities = ("text", "audio") if talker is not None else ("text",)

    @classmethod
    def from_pretrained(cls, path: Path, options: PipelineOptions) -> AcmeChatPipeline:
        device = options.device
        lm = Qwen2ForCausalLM.from_pretrained(path, dtype=torch.float32).eval().to(device)
        tokenizer = AutoTokenizer.from_pretrained(path)
        talker = None
        wanted = str(options.extra.get("enable_audio_output", True)).lower() not in ("false", "0")
        if wanted and (path / "talker").is_dir():
            talker = load_talker(path / "talker").to(device)
        pipeline = cls(lm, tokenizer, talker, options)
        if (path / "acme.json").is_file():  # a checkpoint that reads no audio (build_tiny_chat)
            pipeline.input_modalities = tuple(
                json.loads((path / "acme.json").read_text())["inputs"]
            )
        return pipeline

    def voices(self) -> list[Voice]:
        if self.talker is None:
            return []
        return [Voice(id=name, name=name.title(), language="en") for name in VOICES]

    def stages(self) -> TextStages:
        stops = [self.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
        return TextStages(
            decoder=AcmeThinker(self.lm, stops),
            detokenize=lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True),
            speech=AcmeFollower(self.talker) if self.talker is not None else None,
            schedule=ChunkSchedule(first=1, rest=3),
            max_len=1024,
        )

    def prompt_ids(self, messages: list[ChatMessage]) -> list[int]:
        return list(
            self.tokenizer.apply_chat_template(
                conversation(messages), tokenize=True, add_generation_prompt=True, return_dict=False
            )
        )

    def prepare(self, request: GenerationRequest) -> TextState:
        ids = self.prompt_ids(request.messages)
        sampling = Sampling(
            temperature=request.temperature or 0.0,
            top_p=request.top_p or 1.0,
            top_k=request.top_k or 0,
            seed=request.seed,
        ).seeded()
        return TextState(
            request=request,
            data={"prompt": torch.tensor(ids, device=self.options.device), "sampling": sampling},
            max_tokens=request.max_tokens or MAX_TOKENS,
            with_audio="audio" in request.modalities,
            prompt_tokens=len(ids),
        )


# ------------------------------------------------------------------ the plain reference loop
@torch.inference_mode()
def reference_answer(
    pipeline: AcmeChatPipeline, messages: list[ChatMessage], max_tokens: int, voice: str = "ada"
) -> tuple[list[int], torch.Tensor | None]:
    """Greedy ``generate()`` token ids of the answer and, with a talker, its whole audio."""
    prompt = torch.tensor([pipeline.prompt_ids(messages)])
    stops = [pipeline.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    out = pipeline.lm.generate(
        prompt,
        max_new_tokens=max_tokens,
        do_sample=False,
        eos_token_id=stops,
        pad_token_id=stops[1],
    )
    made = out[0, prompt.shape[1] :].tolist()
    stop = next((i for i, t in enumerate(made) if t in stops), None)
    ids = made if stop is None else made[:stop]
    talker = pipeline.talker
    if talker is None:
        return ids, None
    # reply entry i: the thinker's hidden state at the input of the step that made token i
    full = torch.cat([prompt[0], torch.tensor(made)])[None]
    hidden = pipeline.lm.model(input_ids=full).last_hidden_state[0, prompt.shape[1] - 1 :]
    end = len(made) if stop is None else stop  # the index of the stop token (or max_tokens)
    cache, codes, position, index = DynamicCache(), [], 0, torch.tensor([VOICES[voice]])

    def entry(f: int) -> tuple[torch.Tensor, torch.Tensor]:
        where = torch.tensor([0 if f < end else 1 if f == end else 2])
        return talker.feed(hidden[min(f, len(hidden) - 1)][None], where, index), where

    feed, where = entry(0)
    embeds = torch.stack([talker.voices[index], feed], dim=1)
    for frame in range(max_tokens + 2):
        length = embeds.shape[1]
        positions = torch.arange(position, position + length)[None]
        code = talker.codes(embeds, positions, None, cache)
        position += length
        if int(where[0]) == 2:
            break
        codes.append(code)
        feed, where = entry(frame + 1)
        embeds = (talker.lm.model.embed_tokens(code) + feed).unsqueeze(1)
    return ids, talker.audio(torch.stack(codes, 1))[0]


# ------------------------------------------------------------------ packaging
def load_talker(folder: Path) -> Talker:
    from safetensors.torch import load_file

    talker = Talker(Qwen2ForCausalLM.from_pretrained(folder, dtype=torch.float32))
    missing, unexpected = talker.load_state_dict(
        load_file(str(folder / "talker.safetensors")), strict=False
    )
    if unexpected or any(not k.startswith("lm.") for k in missing):
        raise ValueError(f"{folder}: talker weights do not match ({missing + unexpected})")
    return talker.eval()


def build_tiny_chat(path: Path, *, talker: bool = False, seed: int = 0, hears: bool = True) -> Path:
    """A tiny random checkpoint in the real layout (a talker/ folder when ``talker``; with
    ``hears=False`` its ``acme.json`` says it reads no audio)."""
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: i for i, symbol in enumerate(sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(path)
    torch.manual_seed(seed)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    lm = Qwen2ForCausalLM(_qwen2(len(tokenizer), eos_token_id=eos, pad_token_id=eos)).eval()
    lm.save_pretrained(path)
    if not hears:
        (path / "acme.json").write_text(json.dumps({"inputs": ["text", "image", "video"]}))
    if talker:
        model = Talker(Qwen2ForCausalLM(_qwen2(CODES)))
        model.lm.save_pretrained(path / "talker")
        own = {k: v.contiguous() for k, v in model.state_dict().items() if not k.startswith("lm.")}
        save_file(own, str(path / "talker" / "talker.safetensors"))
    return path


@hookimpl
def omni_register_pipelines(register: Callable[[PipelineSpec], None]) -> None:
    """The plugin's one hook (this module is the plugin object: an entry point names it)."""
    register(
        PipelineSpec(
            name="acme-chat",
            implementation=f"{__name__}:AcmeChatPipeline",
            tasks=("chat",),
            architectures=("Qwen2ForCausalLM",),
            capabilities=PipelineCapabilities(streaming=True, step_batching=True),
            description="A tiny chat model (and omni model, with its talker) on omni's "
            "chat runtime.",
        )
    )
