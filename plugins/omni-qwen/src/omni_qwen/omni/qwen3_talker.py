"""Qwen3-Omni's speech side as stages of the runtime: talker -> code predictor -> code2wav.

What ``Qwen3OmniMoeForConditionalGeneration.generate`` does after the thinker has finished,
done while the thinker writes (transformers' modules throughout):

- :meth:`TalkerFollower.prepare` builds the talker's prompt once the reply buffer holds the
  request's first token: the user turns (``text_projection`` of their input embeddings,
  ``hidden_projection`` of the ``accept_hidden_layer`` hidden states at media positions), then
  the assistant head
  (``<|im_start|>assistant\\n`` projected, four ``tts_pad``, ``tts_bos``, the first token)
  plus the codec control embeddings (nothink, think bos / eos, the speaker, pad, bos).
- :class:`TalkerStage` decodes one frame per step: its input is the sum of the previous
  frame's codebook embeddings plus the projected text of the next reply entry
  (:meth:`~omni_core.chat.ReplyBuffer.read`: the next token; ``tts_eos`` at the stop token;
  ``tts_pad`` past it). Codebook 0 is picked with ``generate``'s processing: repetition
  penalty over the codes made, the control ids suppressed (except the end of speech).
- :class:`CodePredictorStage` fills codebooks 1.. of every row of the step (the code
  predictor's own short cache, batched over rows).
- :class:`Code2WavStage` decodes code chunks with left context. code2wav's last transposed
  convolutions trim a fixed number of samples at the end of any decode, so each chunk after
  the first starts that many samples earlier: the chunks join into exactly the whole decode's
  length, and with enough left context (its sliding window, 72 frames) into nearly its values.

Under ``decode_graphs`` (``on`` / ``static``) the talker's decode step and the code predictor's
loop are the static ones of :mod:`.qwen3_talker_graphs` and :mod:`.qwen3_graphs` (same codes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from omni_core.chat import ReplyBuffer, SpeechFollower, TextState
from omni_core.runtime import Sampling, apply_repetition_penalty, sample_tokens
from omni_core.speech import (
    ARState,
    ChunkDecoder,
    ChunkSchedule,
    DecoderStage,
    FrameStage,
    SpeechStages,
    StepOutput,
)

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from omni_core.runtime import SlotCache


class Specials:
    """The constant embeddings of one loaded model (talker width)."""

    def __init__(self, model: Any) -> None:
        config, talker = model.config, model.talker
        self.talker, self.thinker = talker, model.thinker
        self.device = next(talker.parameters()).device
        self.dtype = next(talker.parameters()).dtype
        ids = torch.tensor(
            [[config.tts_bos_token_id, config.tts_eos_token_id, config.tts_pad_token_id]],
            device=self.device,
        )
        projected = talker.text_projection(model.thinker.get_input_embeddings()(ids))[0]
        self.tts_bos, self.tts_eos, self.tts_pad = projected[0], projected[1], projected[2]
        self.tts_pad_id = int(config.tts_pad_token_id)
        tc = config.talker_config
        self.codec_ids = [tc.codec_nothink_id, tc.codec_think_bos_id, tc.codec_think_eos_id]
        self.codec_pad, self.codec_bos = int(tc.codec_pad_id), int(tc.codec_bos_id)
        self.eos = int(tc.codec_eos_token_id)
        self.groups = int(tc.num_code_groups)
        vocab = int(tc.text_config.vocab_size)
        suppress = torch.zeros(vocab, dtype=torch.bool, device=self.device)
        suppress[max(vocab - 1024, 0) :] = True
        suppress[self.eos] = False
        self.suppress = suppress
        media = config.thinker_config  # generate() masks the media positions with its ids
        self.media_ids = torch.tensor(
            [media.audio_token_id, media.image_token_id, media.video_token_id], device=self.device
        )


class TalkerFollower(SpeechFollower):
    """How a chat request joins the talker (its prompt) and the speech chain."""

    #: The first token's reply entry is written by the step after it (``follow_lag``).
    lead = 2

    def __init__(
        self,
        model: Any,
        *,
        schedule: ChunkSchedule,
        left_context: int,
        max_len: int,
        decode_graphs: str = "off",
        talker_stage: Callable[[Specials, ReplyBuffer], DecoderStage] | None = None,
    ) -> None:
        self.model = model
        self.specials = Specials(model)
        self.schedule, self.left_context, self.max_len = schedule, left_context, max_len
        #: ``on`` / ``static`` / ``off``: the code predictor's loop (:mod:`.qwen3_graphs`).
        self.decode_graphs = decode_graphs
        #: How the talker stage is made (the pipeline passes the graphed one of
        #: :mod:`.qwen3_talker_graphs`, which subclasses :class:`TalkerStage`).
        self.talker_stage = talker_stage or TalkerStage
        self.reply: ReplyBuffer | None = None

    def _predictor_stage(self, max_rows: int) -> FrameStage:
        """The code predictor stage of ``decode_graphs``: CUDA graphs (``on``, on CUDA), the
        static loop uncaptured (``static``), or the eager stage (``off``, or ``on`` off CUDA);
        ``max_rows``: the chain's batch limit (the buckets captured up front)."""
        mode = self.decode_graphs
        if mode == "off" or (mode == "on" and self.specials.device.type != "cuda"):
            return CodePredictorStage(self.specials)
        from .qwen3_graphs import GraphCodePredictorStage

        return GraphCodePredictorStage(self.specials, capture=mode == "on", max_rows=max_rows)

    def stages(self, reply: ReplyBuffer) -> SpeechStages:
        self.reply = reply
        return SpeechStages(
            decoder=self.talker_stage(self.specials, reply),
            codec=Code2WavStage(self.model.code2wav, self.left_context),
            frame_stages=(self._predictor_stage(reply.rows),),
            schedule=self.schedule,
            max_len=self.max_len,
        )

    def prepare(self, state: TextState) -> ARState:
        assert self.reply is not None and self.reply.values is not None
        sp, talker = self.specials, self.model.talker
        source = state.data.pop("talker_source")
        user_ids = source["user_ids"]
        media = torch.isin(user_ids, sp.media_ids)[:, None]
        user = torch.where(
            media,
            talker.hidden_projection(source["user_hidden"]),
            talker.text_projection(source["user_embeds"]),
        )
        head = talker.text_projection(source["assistant_head"])
        first = talker.text_projection(self.reply.values[state.slot, 0])
        text = torch.cat([head, sp.tts_pad.expand(4, -1), sp.tts_bos[None], first[None]]).to(
            sp.dtype
        )
        codec_ids = [*sp.codec_ids, int(state.data["speaker_id"]), sp.codec_pad, sp.codec_bos]
        codec = talker.get_input_embeddings()(torch.tensor(codec_ids, device=sp.device))
        zeros = torch.zeros(3, codec.shape[-1], dtype=sp.dtype, device=sp.device)
        codec = torch.cat([zeros, codec])
        prompt = torch.cat([user.to(sp.dtype), text + codec])
        talker_ids = torch.cat(
            [user_ids, torch.full((9,), sp.tts_pad_id, dtype=user_ids.dtype, device=sp.device)]
        )
        rope, delta = self._positions(state, talker_ids)
        sampling: Sampling = state.data["talker_sampling"]
        return ARState(
            request=state.request,
            data={
                "prompt": prompt,
                "rope": rope,
                "rope_delta": delta,
                "reply_slot": state.slot,
                "sampling": sampling,
                "predictor_sampling": state.data["predictor_sampling"],
                "seen": torch.zeros(sp.suppress.shape[0], dtype=torch.bool, device=sp.device),
            },
            max_frames=int(state.data["max_frames"]),
            # a non-streamed answer is decoded in one piece (no chunk joins at all)
            schedule=None if state.request.stream else ChunkSchedule.whole(),
        )

    def _positions(self, state: TextState, talker_ids: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """``[3, P]`` RoPE positions of the talker's prompt and the delta of its decode steps:
        ``get_rope_index`` over the talker's ids when the prompt has media, else 0..P-1."""
        device = talker_ids.device
        inputs = {k: v.to(device) for k, v in state.data["inputs"].items() if k != "input_ids"}
        mask = inputs.get("feature_attention_mask")
        if not {"image_grid_thw", "video_grid_thw", "feature_attention_mask"} & inputs.keys():
            rope = torch.arange(talker_ids.shape[0], device=device)[None].expand(3, -1)
            return rope, torch.zeros((), dtype=torch.long, device=device)
        # transformers' talker reads ``audio_config`` off its own config, which has none; the
        # thinker's get_rope_index is the same function over the same token ids
        owner = self.model.talker if mask is None else self.model.thinker.model
        rope, delta = owner.get_rope_index(
            talker_ids[None],
            inputs.get("image_grid_thw"),
            inputs.get("video_grid_thw"),
            torch.ones_like(talker_ids)[None],
            False,
            None if mask is None else mask.sum(-1),
            inputs.get("video_second_per_grid"),
        )
        return rope[:, 0].to(device), delta[0, 0].to(device)


def _stack(states: list[ARState], key: str) -> torch.Tensor:
    return torch.stack([s.data[key] for s in states])


class TalkerStage(DecoderStage):
    """The talker's MoE decoder on the runtime's slot cache (codebook 0 of each frame)."""

    def __init__(self, specials: Specials, reply: ReplyBuffer) -> None:
        self.sp, self.reply = specials, reply
        self.talker = specials.talker

    def _forward(self, embeds: torch.Tensor, rope: torch.Tensor, cache: SlotCache) -> torch.Tensor:
        text = cache.position_ids()
        out = self.talker.model(
            inputs_embeds=embeds,
            position_ids=torch.cat([text[None], rope]),
            attention_mask=cache.attention_mask(self.sp.dtype),
            cache=cache,
            use_cache=True,
        )
        return out.last_hidden_state[:, -1]

    def _pick(self, states: list[ARState], hidden: torch.Tensor) -> StepOutput:
        scores = self.talker.codec_head(hidden).float()
        seen = _stack(states, "seen")
        penalties = torch.tensor(
            [s.data["sampling"].repetition_penalty for s in states], device=scores.device
        )
        scores = apply_repetition_penalty(scores, seen, penalties)
        scores = scores.masked_fill(self.sp.suppress, float("-inf"))
        code0 = sample_tokens(
            scores, [s.data["sampling"] for s in states], [s.frames for s in states]
        )
        seen = seen.scatter(1, code0[:, None], True)
        for row, state in enumerate(states):
            state.data["seen"] = seen[row]
        return StepOutput(tokens=code0[:, None], stop=code0 == self.sp.eos, hidden=hidden)

    def prefill(self, states: list[ARState], cache: SlotCache) -> StepOutput:
        embeds = _stack(states, "prompt")
        rope = torch.stack([s.data["rope"] for s in states], dim=1)
        return self._pick(states, self._forward(embeds, rope, cache))

    def decode(self, states: list[ARState], last: StepOutput, cache: SlotCache) -> StepOutput:
        codes = last.tokens
        predictor = self.talker.code_predictor.model.get_input_embeddings()
        rows = [self.talker.get_input_embeddings()(codes[:, 0])]
        rows += [predictor[i](codes[:, i + 1]) for i in range(codes.shape[1] - 1)]
        frame = torch.stack(rows, dim=1).sum(1)
        values, where = self.reply.read(
            [s.data["reply_slot"] for s in states], [s.frames for s in states]
        )
        text = torch.where(
            (where == 0)[:, None],
            self.talker.text_projection(values.to(self.sp.dtype)),
            torch.where((where == 1)[:, None], self.sp.tts_eos, self.sp.tts_pad),
        )
        embeds = (frame + text)[:, None]
        position = cache.position_ids() + _stack(states, "rope_delta")[:, None]
        return self._pick(states, self._forward(embeds, position[None].expand(3, -1, -1), cache))


class CodePredictorStage(FrameStage):
    """Codebooks 1..G-1 of every row's frame: the code predictor, batched over rows."""

    def __init__(self, specials: Specials) -> None:
        self.sp = specials
        self.predictor = specials.talker.code_predictor

    def run(self, states: list[ARState], out: StepOutput) -> StepOutput:
        from transformers.cache_utils import DynamicCache

        assert out.hidden is not None
        samplings = [s.data["predictor_sampling"] for s in states]
        frames = [s.frames * self.sp.groups for s in states]
        code0 = out.tokens[:, 0]
        cache = DynamicCache()
        embeds = torch.stack([out.hidden, self.sp.talker.get_input_embeddings()(code0)], dim=1)
        result = self.predictor(inputs_embeds=embeds, cache=cache, use_cache=True)
        codes = [code0]
        for group in range(1, self.sp.groups):
            code = sample_tokens(
                result.logits[:, -1].float(), samplings, [f + group for f in frames]
            )
            codes.append(code)
            if group < self.sp.groups - 1:
                result = self.predictor(
                    input_ids=code[:, None], cache=cache, use_cache=True, generation_steps=group
                )
        return StepOutput(tokens=torch.stack(codes, dim=1), stop=out.stop)


class Code2WavStage(ChunkDecoder):
    """code2wav over chunks with left context (module docstring: the trimmed samples)."""

    sample_rate = 24000
    #: code2wav draws no noise: a row's audio is its own in any batch (within float rounding),
    #: so under ``--batch-seeded`` seeded answers' chunks share calls too.
    batches_seeded = True

    def __init__(self, code2wav: Any, left_context: int) -> None:
        self.code2wav = code2wav
        self.samples_per_frame = int(code2wav.total_upsample)
        self.left_context = int(left_context)
        self.trimmed: int | None = None

    def decode(self, codes: torch.Tensor, context: int) -> torch.Tensor:
        wav = self.code2wav(codes.long())[:, 0]
        if self.trimmed is None:
            self.trimmed = codes.shape[-1] * self.samples_per_frame - wav.shape[-1]
        start = context * self.samples_per_frame - self.trimmed if context else 0
        return wav[:, max(start, 0) :]
