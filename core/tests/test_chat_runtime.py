"""The chat runtime on real tiny transformers models: a Qwen2 thinker whose answers equal
``generate()``, batched or alone, and a talker that reads the thinker's reply buffer as the
text is written, checked against the same chain run one request at a time, offline."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from omni_core.chat.runtime import ChatRuntime  # noqa: E402
from omni_core.chat.stages import (  # noqa: E402
    ReplyBuffer,
    SpeechFollower,
    TextStage,
    TextStages,
    TextState,
    TokenOutput,
)
from omni_core.contract.types import GenerationRequest  # noqa: E402
from omni_core.runtime.cache import SlotCache  # noqa: E402
from omni_core.runtime.sampling import Sampling, sample_tokens  # noqa: E402
from omni_core.runtime.stages import (  # noqa: E402
    ARState,
    ChunkDecoder,
    ChunkSchedule,
    DecoderStage,
    SpeechStages,
    StepOutput,
)

np = pytest.importorskip("numpy")

EOS = 7
VOCAB = 48


def _lm(seed: int, vocab: int = VOCAB) -> transformers.Qwen2ForCausalLM:
    cfg = transformers.Qwen2Config(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        eos_token_id=EOS, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(seed)
    return transformers.Qwen2ForCausalLM(cfg).eval()


class Thinker(TextStage):
    """A causal LM: the token made, its stop flag, and (follow) the hidden of the step's input."""

    def __init__(self, lm: transformers.Qwen2ForCausalLM) -> None:
        self.lm = lm

    def _run(self, states: list[TextState], ids: torch.Tensor, cache: SlotCache) -> TokenOutput:
        out = self.lm.model(
            input_ids=ids,
            position_ids=cache.position_ids(),
            attention_mask=cache.attention_mask(torch.float32),
            cache=cache,
        )
        hidden = out.last_hidden_state[:, -1]
        logits = self.lm.lm_head(hidden)
        tokens = sample_tokens(
            logits, [s.data["sampling"] for s in states], [s.tokens for s in states]
        )
        return TokenOutput(tokens=tokens, stop=tokens == EOS, follow=hidden)

    def prefill(self, states: list[TextState], cache: SlotCache) -> TokenOutput:
        return self._run(states, torch.stack([s.data["prompt"] for s in states]), cache)

    def decode(self, states: list[TextState], last: TokenOutput, cache: SlotCache) -> TokenOutput:
        return self._run(states, last.tokens.view(-1, 1), cache)


class Talker(DecoderStage):
    """Frame f reads reply entry f: its value projected, or a learned end / pad vector."""

    def __init__(self, lm: transformers.Qwen2ForCausalLM, reply: ReplyBuffer) -> None:
        self.lm, self.reply = lm, reply
        torch.manual_seed(5)
        self.proj = torch.nn.Linear(32, 32)
        self.special = torch.randn(3, 32)  # row 1: the text's end, row 2: past it

    def feed(self, slots: list[int], frames: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        values, where = self.reply.read(slots, frames)
        return torch.where(
            (where == 0).unsqueeze(-1), self.proj(values), self.special[where]
        ), where

    def _run(self, embeds: torch.Tensor, where: torch.Tensor, cache: SlotCache) -> StepOutput:
        out = self.lm.model(
            inputs_embeds=embeds,
            position_ids=cache.position_ids(),
            attention_mask=cache.attention_mask(torch.float32),
            cache=cache,
        )
        codes = self.lm.lm_head(out.last_hidden_state[:, -1]).argmax(-1)
        return StepOutput(tokens=codes.view(-1, 1), stop=where == 2)

    def prefill(self, states: list[ARState], cache: SlotCache) -> StepOutput:
        feed, where = self.feed([s.data["slot"] for s in states], [0] * len(states))
        bos = self.lm.model.embed_tokens(torch.zeros(len(states), dtype=torch.long))
        return self._run(torch.stack([bos, feed], dim=1), where, cache)

    def decode(self, states: list[ARState], last: StepOutput, cache: SlotCache) -> StepOutput:
        feed, where = self.feed([s.data["slot"] for s in states], [s.frames for s in states])
        embeds = self.lm.model.embed_tokens(last.tokens[:, 0]) + feed
        return self._run(embeds.unsqueeze(1), where, cache)

    def prompt_length(self, state: ARState) -> int:
        return 2


class Codec(ChunkDecoder):
    """A real (random) transposed convolution: each frame's code -> 4 samples, no overlap."""

    sample_rate, samples_per_frame, left_context = 16000, 4, 2

    def __init__(self) -> None:
        torch.manual_seed(9)
        self.embed = torch.nn.Embedding(VOCAB, 8)
        self.up = torch.nn.ConvTranspose1d(8, 1, kernel_size=4, stride=4)

    def decode(self, codes: torch.Tensor, context: int) -> torch.Tensor:
        audio = torch.tanh(self.up(self.embed(codes[:, 0]).transpose(1, 2)))[:, 0]
        return audio[:, context * self.samples_per_frame :]


class Follower(SpeechFollower):
    lead = 1

    def __init__(self) -> None:
        self.lm = _lm(3)
        self.talker: Talker | None = None

    def stages(self, reply: ReplyBuffer) -> SpeechStages:
        self.talker = Talker(self.lm, reply)
        return SpeechStages(
            decoder=self.talker, codec=Codec(), schedule=ChunkSchedule(first=2, rest=3), max_len=256
        )

    def prepare(self, state: TextState) -> ARState:
        return ARState(request=state.request, data={"slot": state.slot}, max_frames=64)


def _state(
    prompt: list[int], max_tokens: int = 12, audio: bool = False, **sampling: float
) -> TextState:
    return TextState(
        request=GenerationRequest(prompt="x"),
        data={"prompt": torch.tensor(prompt), "sampling": Sampling(**sampling).seeded()},  # type: ignore[arg-type]
        max_tokens=max_tokens,
        with_audio=audio,
    )


def _detok(ids: list[int]) -> str:
    return " ".join(f"t{i}" for i in ids)


@pytest.fixture(scope="module")
def thinker() -> transformers.Qwen2ForCausalLM:
    return _lm(1)


def _reference_ids(
    lm: transformers.Qwen2ForCausalLM, prompt: list[int], max_tokens: int
) -> list[int]:
    out = lm.generate(
        torch.tensor([prompt]), max_new_tokens=max_tokens, do_sample=False, eos_token_id=EOS,
        pad_token_id=0,
    )  # fmt: skip
    made = out[0, len(prompt) :].tolist()
    return made[: made.index(EOS)] if EOS in made else made


def _collect(stream) -> tuple[str, list, object]:
    text, audio, last = "", [], None
    for delta in stream:
        text += delta.text
        if delta.audio is not None:
            audio.append(delta.audio.samples)
        last = delta
    return text, audio, last


PROMPTS = [[3, 9, 11, 2], [5, 1, 4, 4, 8, 30, 2], [12, 40]]


def test_greedy_text_equals_generate_alone_and_batched(thinker) -> None:
    stages = TextStages(decoder=Thinker(thinker), detokenize=_detok, max_len=128)
    expected = [_reference_ids(thinker, p, 12) for p in PROMPTS]
    for prompt, ids in zip(PROMPTS, expected, strict=True):
        runtime = ChatRuntime(stages, max_batch=4)
        text, _, last = _collect(runtime.open(_state(prompt)))
        assert text == _detok(ids)
        assert last.usage.completion_tokens == len(ids) and last.usage.prompt_tokens == len(prompt)
        assert last.finish_reason == ("length" if len(ids) == 12 else "stop")
    # all three at once, in two slots: the third waits and joins when one leaves
    runtime = ChatRuntime(stages, max_batch=2)
    streams = [runtime.open(_state(p)) for p in PROMPTS]
    answers = [""] * 3
    while not all(s.done for s in streams):
        runtime.step()
        for i, s in enumerate(streams):
            answers[i] += "".join(d.text for d in s.poll())
    assert answers == [_detok(ids) for ids in expected]
    assert runtime.syncs < runtime.steps  # tokens are read back per chunk, not per step


def test_seeded_sampling_is_the_same_alone_and_batched(thinker) -> None:
    stages = TextStages(decoder=Thinker(thinker), detokenize=_detok, max_len=128)
    knobs = {"temperature": 1.3, "top_p": 0.9, "top_k": 20, "seed": 1234}
    alone = _collect(ChatRuntime(stages).open(_state(PROMPTS[0], **knobs)))[0]
    runtime = ChatRuntime(stages)
    others = [runtime.open(_state(p, temperature=1.0, seed=i)) for i, p in enumerate(PROMPTS)]
    mine = runtime.open(_state(PROMPTS[0], **knobs))
    assert _collect(mine)[0] == alone
    assert all(s.done for s in others)
    assert (
        alone != _collect(ChatRuntime(stages).open(_state(PROMPTS[0], **{**knobs, "seed": 9})))[0]
    )


def _reference_talker(thinker, follower: Follower, prompt: list[int], max_tokens: int) -> list[int]:
    """The chain one request at a time: the whole thinker answer first, then the talker."""
    ids = _reference_ids(thinker, prompt, max_tokens)
    stop_at = len(ids)  # the stop token's index (or max_tokens: the text ends there)
    seq = torch.tensor([prompt + ids])
    hidden = thinker.model(input_ids=seq).last_hidden_state[0]
    # reply entry i: the hidden of the input of the step that made token i
    reply = [hidden[len(prompt) - 1 + i] for i in range(stop_at)]
    talker = follower.talker
    assert talker is not None

    def feed(f: int) -> torch.Tensor:
        if f < stop_at:
            return talker.proj(reply[f])
        return talker.special[1 if f == stop_at else 2]

    lm = follower.lm
    bos = lm.model.embed_tokens(torch.zeros(1, dtype=torch.long))[0]
    embeds = [bos, feed(0)]
    codes: list[int] = []
    f = 0
    while True:
        out = lm.model(inputs_embeds=torch.stack(embeds).unsqueeze(0)).last_hidden_state[0, -1]
        if f > stop_at:  # past the text: the stop frame is not audio
            return codes
        codes.append(int(lm.lm_head(out).argmax()))
        f += 1
        embeds.append(lm.model.embed_tokens(torch.tensor(codes[-1])) + feed(f))


def test_talker_follows_the_thinker_and_batched_equals_alone(thinker) -> None:
    follower = Follower()
    stages = TextStages(decoder=Thinker(thinker), detokenize=_detok, speech=follower, max_len=128)
    runtime = ChatRuntime(stages, max_batch=4)
    codec = runtime.speech_chain.stages.codec
    with torch.inference_mode():
        expected = [_reference_talker(thinker, follower, p, 10) for p in PROMPTS]
        whole = [codec.decode(torch.tensor([[c]]), 0)[0].numpy() for c in expected]
    streams = [runtime.open(_state(p, max_tokens=10, audio=True)) for p in PROMPTS]
    results = [_collect(s) for s in streams]
    for (text, audio, last), codes, prompt, ref_audio in zip(
        results, expected, PROMPTS, whole, strict=True
    ):
        assert text == _detok(_reference_ids(thinker, prompt, 10))
        assert streams[0].speech is not None
        got = torch.cat([a if isinstance(a, torch.Tensor) else torch.from_numpy(a) for a in audio])
        assert got.shape[0] == len(codes) * 4
        assert torch.allclose(got, torch.from_numpy(ref_audio), atol=1e-6)
        assert last.finish_reason in ("stop", "length")
    assert [s.speech.all_codes()[0].tolist() for s in streams] == expected
    assert runtime.open_streams == 0 and sorted(runtime._free) == [0, 1, 2, 3]


def test_text_only_runtime_refuses_audio_and_cancel_frees_the_slot(thinker) -> None:
    from omni_core.contract.errors import InvalidRequestError, RequestCancelledError

    runtime = ChatRuntime(TextStages(decoder=Thinker(thinker), detokenize=_detok), max_batch=1)
    with pytest.raises(InvalidRequestError, match="without its speech chain"):
        runtime.open(_state(PROMPTS[0], audio=True))
    stream = runtime.open(_state(PROMPTS[1], max_tokens=40))
    runtime.step()
    stream.cancel()
    runtime.step()
    with pytest.raises(RequestCancelledError):  # after the deltas already handed out
        for delta in stream:
            assert delta.text
    assert runtime._free == [0]
    assert _collect(runtime.open(_state(PROMPTS[2])))[0]  # the slot serves the next request


def test_a_whole_answer_schedule_still_stops_at_the_stop_frame(thinker) -> None:
    """A request decoded in one chunk (ChunkSchedule.whole, e.g. not streamed) has its stop
    flags read every ``check`` frames: it ends within ``check`` frames of its stop, not at
    ``max_frames``, and its audio is the streamed request's."""
    follower = Follower()
    stages = TextStages(decoder=Thinker(thinker), detokenize=_detok, speech=follower, max_len=256)
    runtime = ChatRuntime(stages, max_batch=2)
    prepare = follower.prepare

    def whole(state: TextState) -> ARState:
        ar = prepare(state)
        ar.max_frames, ar.schedule = 200, ChunkSchedule.whole(check=4)
        return ar

    streamed = _collect(runtime.open(_state(PROMPTS[0], max_tokens=6, audio=True)))
    follower.prepare = whole  # type: ignore[method-assign]
    stream = runtime.open(_state(PROMPTS[0], max_tokens=6, audio=True))
    text, audio, _ = _collect(stream)
    assert text == streamed[0] and len(audio) == 1  # one chunk: the whole answer
    np.testing.assert_allclose(audio[0], np.concatenate(streamed[1]), atol=1e-6)
    codes = stream.speech.all_codes().shape[1]
    assert codes < stream.speech.state.frames <= codes + 1 + 4  # stopped soon after the stop
