"""The stages of Qwen2.5-Omni on the core's chat runtime: thinker, talker, token2wav.

What ``Qwen2_5OmniForConditionalGeneration.generate`` does in three passes (the whole thinker
answer, then the whole talker answer, then token2wav) runs here as it is written:

- :class:`ThinkerStage` (a :class:`~omni_core.chat.TextStage`): prefill the prompt embeddings (media
  features already merged by the pipeline) with their mrope positions, then one token per step,
  positions ``cache length + rope delta``. Each step's ``follow`` is what the talker reads for
  the token fed in that step: the thinker's last hidden state at its position plus its
  embedding (transformers' ``thinker_reply_part``); it belongs to the previous token, hence
  ``follow_lag=1``. The prefill leaves the talker's prompt (the prompt's hidden states plus its
  embeddings, media positions zeroed) in ``state.data``.
- :class:`TalkerFollower` / :class:`TalkerStage` (a :class:`~omni_core.speech.DecoderStage`): the
prompt
  is that, then the speaker's text-bos embedding and the first reply entry, with the codec pad
  and bos embeddings added to the last two positions; each decode step feeds the previous code's
  embedding plus the reply entry of its index (:meth:`~omni_core.chat.ReplyBuffer.read`: the text
  eos embedding at the stop token, the pad embedding after it). The repetition penalty runs over
  the codes seen (prompt mask/pad/bos included), the codec bos is suppressed (and ids token2wav
  has no embedding for: never said by a trained talker), the codec pad and end codes stop it.
  ``lead = 2``: the first reply entry exists once two tokens are made.
- :class:`Token2WavDecoder` (a :class:`~omni_core.speech.ChunkDecoder`): the DiT + BigVGAN, the
  rows of one speaker in one batch (each row's noise drawn from its own seed, what transformers
  draws decoding that sample alone; the ODE solved for all rows at once); on CUDA the
  DiT's forward is replayed as CUDA graphs (:mod:`.qwen25_dit_graphs`). A frame carries
  three integers: the code, the speaker's index and the request's noise seed (the codec is not
  told the states of its rows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omni_core.chat import ReplyBuffer, SpeechFollower, TextStage, TextState, TokenOutput
from omni_core.runtime import Sampling, apply_repetition_penalty, sample_tokens
from omni_core.speech import (
    ARState,
    ChunkDecoder,
    ChunkSchedule,
    DecoderStage,
    SpeechStages,
    StepOutput,
)

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from omni_core.runtime import SlotCache


def _mrope(cache: SlotCache, deltas: list[int]) -> torch.Tensor:
    """``[3, rows, new]`` decode positions: each row's cache position plus its rope delta."""
    import torch

    positions = cache.position_ids()
    delta = torch.tensor(deltas, dtype=torch.long).to(positions.device, non_blocking=True)
    return (positions + delta[:, None]).unsqueeze(0).expand(3, -1, -1)


class ThinkerStage(TextStage):
    """The thinker's language model on the runtime's cache (module doc)."""

    def __init__(self, thinker: Any, stop_ids: list[int], follow: bool) -> None:
        import torch

        self.thinker, self.follow = thinker, follow
        self.lm = thinker.model.language_model
        self.embed = thinker.get_input_embeddings()
        self.device = self.embed.weight.device
        self.stop_ids = torch.tensor(stop_ids, dtype=torch.long, device=self.device)

    def _forward(self, embeds: torch.Tensor, positions: torch.Tensor, cache: Any) -> torch.Tensor:
        out = self.lm(
            inputs_embeds=embeds,
            position_ids=positions,
            attention_mask=cache.attention_mask(embeds.dtype),
            cache=cache,
            use_cache=True,
        )
        return out.last_hidden_state

    def _pick(self, states: list[TextState], hidden: torch.Tensor) -> torch.Tensor:
        logits = self.thinker.lm_head(hidden).float()
        samplings: list[Sampling] = [s.data["sampling"] for s in states]
        return sample_tokens(logits, samplings, [s.tokens for s in states])

    def prefill(self, states: list[TextState], cache: Any) -> TokenOutput:
        import torch

        embeds = torch.stack([s.data["prompt"] for s in states])
        positions = torch.cat([s.data["positions"] for s in states], dim=1)
        hidden = self._forward(embeds, positions, cache)
        for row, state in enumerate(states):
            if state.with_audio:
                state.data["talker_prompt"] = hidden[row] + state.data["talker_embeds"]
        last = hidden[:, -1]
        tokens = self._pick(states, last)
        follow = (last + embeds[:, -1]) if self.follow else None
        return TokenOutput(tokens, torch.isin(tokens, self.stop_ids), follow, follow_lag=1)

    def decode(self, states: list[TextState], last: TokenOutput, cache: Any) -> TokenOutput:
        import torch

        embeds = self.embed(last.tokens.view(-1, 1))
        positions = _mrope(cache, [s.data["rope_delta"] for s in states])
        hidden = self._forward(embeds, positions, cache)[:, -1]
        tokens = self._pick(states, hidden)
        follow = (hidden + embeds[:, 0]) if self.follow else None
        return TokenOutput(tokens, torch.isin(tokens, self.stop_ids), follow, follow_lag=1)


@dataclass
class TalkerSettings:
    """How the talker decodes (transformers' ``talker_*`` arguments of ``generate``)."""

    sampling: Sampling
    max_frames: int = 4096


class TalkerStage(DecoderStage):
    """The talker's decoder on the runtime's cache (module doc)."""

    def __init__(
        self, talker: Any, reply: ReplyBuffer, text_ends: torch.Tensor, codes: int
    ) -> None:
        import torch

        self.talker, self.reply = talker, reply
        self.codec_embed = talker.get_input_embeddings()
        self.device = self.codec_embed.weight.device
        #: [2, hidden]: the text eos and pad embeddings (what the reply reads past the text).
        self.text_ends = text_ends
        self.stop_ids = torch.tensor(
            [talker.codec_pad_token, talker.codec_eos_token], device=self.device
        )
        self.vocab = int(talker.codebook_size)
        #: [vocab] bool: ids never picked: the codec bos (as generate suppresses it) and ids
        #: token2wav has no embedding for (a trained talker never says them; a random one may)
        banned = torch.zeros(self.vocab, dtype=torch.bool, device=self.device)
        banned[talker.codec_bos_token] = True
        banned[codes:] = True
        banned[self.stop_ids] = False
        self.banned = banned
        self.seen: torch.Tensor | None = None  # [slots, vocab] bool, by talker slot

    def prompt_length(self, state: ARState) -> int:
        return int(state.data["prompt"].shape[0])

    def _forward(self, embeds: torch.Tensor, positions: torch.Tensor, cache: Any) -> torch.Tensor:
        out = self.talker.model(
            inputs_embeds=self.talker.thinker_to_talker_proj(embeds),
            position_ids=positions,
            attention_mask=cache.attention_mask(embeds.dtype),
            cache=cache,
            use_cache=True,
        )
        return out.last_hidden_state[:, -1]

    def _pick(self, states: list[ARState], hidden: torch.Tensor) -> StepOutput:
        import torch

        assert self.seen is not None
        slots = torch.tensor([s.slot for s in states], dtype=torch.long).to(
            self.device, non_blocking=True
        )
        logits = self.talker.codec_head(hidden).float()
        samplings: list[Sampling] = [s.data["talker"].sampling for s in states]
        penalties = torch.tensor([s.repetition_penalty for s in samplings], device=self.device)
        logits = apply_repetition_penalty(logits, self.seen[slots], penalties)
        logits = logits.masked_fill(self.banned, float("-inf"))
        codes = sample_tokens(logits, samplings, [s.frames for s in states])
        self.seen[slots, codes] = True
        extra = torch.tensor([s.data["frame_tail"] for s in states], dtype=torch.long)
        frame = torch.cat([codes[:, None], extra.to(self.device, non_blocking=True)], dim=1)
        return StepOutput(frame, torch.isin(codes, self.stop_ids), hidden)

    def prefill(self, states: list[ARState], cache: Any) -> StepOutput:
        import torch

        if self.seen is None or self.seen.shape[0] < cache.num_slots:
            self.seen = torch.zeros(
                cache.num_slots, self.vocab, dtype=torch.bool, device=self.device
            )
        for state in states:
            self.seen[state.slot] = False
            self.seen[state.slot, state.data["prompt_codes"]] = True
        embeds = torch.stack([s.data["prompt"] for s in states])
        positions = torch.cat([s.data["positions"] for s in states], dim=1)
        return self._pick(states, self._forward(embeds, positions, cache))

    def decode(self, states: list[ARState], last: StepOutput, cache: Any) -> StepOutput:
        values, where = self.reply.read(
            [s.data["chat_slot"] for s in states], [s.frames for s in states]
        )
        ends = self.text_ends[(where - 1).clamp(min=0)]
        reply = values + ends * (where > 0).unsqueeze(-1).to(ends.dtype)
        embeds = self.codec_embed(last.tokens[:, 0]) + reply.to(self.text_ends.dtype)
        positions = _mrope(cache, [s.data["rope_delta"] for s in states])
        return self._pick(states, self._forward(embeds[:, None], positions, cache))


#: token2wav's classifier-free guidance and its time-point sway (transformers' defaults, which
#: ``Qwen2_5OmniForConditionalGeneration.generate`` uses).
GUIDANCE_SCALE = 0.5
SWAY = -1.0


@contextmanager
def _matmul_precision(precision: str | None) -> Iterator[None]:
    """CUDA float32 matmuls at ``precision`` inside the block (None: unchanged). The setting is
    the process's: set around the engine thread's token2wav call only, restored after."""
    import torch

    if precision is None:
        yield
        return
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = precision
    try:
        yield
    finally:
        matmul.fp32_precision = before


class Token2WavDecoder(ChunkDecoder):
    """token2wav (DiT + BigVGAN) over chunks with left context (module doc)."""

    sample_rate = 24000
    #: each row's noise comes from its own seed, so seeded answers share calls
    batches_seeded = True

    def __init__(
        self,
        token2wav: Any,
        speakers: list[dict[str, Any]],
        steps: int,
        left: int,
        graphs: bool = True,
        tf32: bool = False,
    ) -> None:
        from .qwen25_dit_graphs import FixedSpeaker, GraphedDiT

        #: CUDA float32 matmuls as TF32 inside :meth:`decode` (``token2wav_matmul=tf32``: lossy)
        self.tf32 = bool(tf32)

        dit = token2wav.code2wav_dit_model
        #: The DiT's forward replayed as CUDA graphs inside :meth:`decode` (``cuda_graphs``).
        self.graphs = GraphedDiT(dit, capture=graphs)
        #: The ECAPA speaker encoding computed once per decode, not at all 36 forwards.
        self.speaker_encoding = FixedSpeaker(dit)
        bigvgan = token2wav.config.bigvgan_config
        upsample = 1
        for rate in bigvgan.upsample_rates:
            upsample *= int(rate)
        self.token2wav, self.speakers, self.steps = token2wav, speakers, int(steps)
        self.samples_per_frame = int(dit.repeats) * upsample
        self.left_context = int(left)
        self.device = next(token2wav.parameters()).device

    def decode(self, codes: torch.Tensor, context: int) -> torch.Tensor:
        import torch

        new = codes.shape[-1] - context
        tails = codes[:, 1:, 0].to("cpu").tolist()  # speaker index, seed (one small read)
        out: list[torch.Tensor | None] = [None] * len(tails)
        by_speaker: dict[int, list[int]] = {}
        for row, (speaker, _) in enumerate(tails):
            by_speaker.setdefault(speaker, []).append(row)
        with self.graphs.scope(), _matmul_precision("tf32" if self.tf32 else None):
            for speaker, rows in by_speaker.items():
                seeds = [tails[row][1] for row in rows]
                wavs = self._waveforms(codes[rows, 0], self.speakers[speaker], seeds)
                for row, wav in zip(rows, wavs, strict=True):
                    out[row] = wav[wav.shape[0] - new * self.samples_per_frame :].float()
        return torch.stack(out)  # type: ignore[arg-type]

    def _waveforms(
        self, codes: torch.Tensor, speaker: dict[str, Any], seeds: list[int]
    ) -> list[torch.Tensor]:
        """token2wav of ``codes [B, T]`` (one speaker) in one batch: each row's initial noise
        drawn from its own seed (what transformers' ``sample`` draws after
        ``torch.manual_seed(seed)`` for that row alone), the DiT's ODE solved for all rows at
        once with transformers' RK4 solver and classifier-free guidance, BigVGAN batched."""
        import torch
        from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import (
            RungeKutta4ODESolver,
        )

        dit, device = self.token2wav.code2wav_dit_model, self.device
        batch, length = codes.shape[0], codes.shape[1] * int(dit.repeats)
        reference = speaker["ref_mel"].to(device).float()[None].expand(batch, -1, -1)
        condition = speaker["cond"].to(device).float()[None, None].expand(batch, length, -1)
        noise = torch.stack(
            [
                torch.randn(
                    (length, dit.mel_dim),
                    generator=torch.Generator(device).manual_seed(seed),
                    dtype=reference.dtype,
                    device=device,
                )
                for seed in seeds
            ]
        )

        def velocity(time_step: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
            both = dit(
                hidden_states=hidden,
                quantized_code=codes,
                speaker_embedding=condition,
                condition_vector=reference,
                time_step=time_step,
                apply_cfg=True,
            )
            guided, null = torch.chunk(both, 2, dim=0)
            return guided + (guided - null) * GUIDANCE_SCALE

        times = torch.linspace(0, 1, self.steps, device=device, dtype=condition.dtype)
        times = times + SWAY * (torch.cos(torch.pi / 2 * times) - 1 + times)
        with self.speaker_encoding.scope(reference):
            solver = RungeKutta4ODESolver(function=velocity, initial_value=noise)
            mel = solver.integrate(times)[-1]
        wav = self.token2wav.code2wav_bigvgan_model(mel.permute(0, 2, 1))
        return list(wav.reshape(batch, -1))


class TalkerFollower(SpeechFollower):
    """How a chat request joins the talker (module doc)."""

    lead = 2

    def __init__(
        self,
        model: Any,
        speakers: list[dict[str, Any]],
        schedule: ChunkSchedule,
        *,
        talker_stage: Callable[..., DecoderStage] | None = None,
        **codec: Any,
    ) -> None:
        import torch

        self.model, self.speakers, self.schedule, self.codec = model, speakers, schedule, codec
        #: Builds the talker's stage from :class:`TalkerStage`'s arguments (the pipeline's
        #: ``decode_graphs`` choice; default: :class:`TalkerStage`).
        self.talker_stage = talker_stage or TalkerStage
        talker = model.talker
        embed = model.thinker.get_input_embeddings()
        device = embed.weight.device
        ids = torch.tensor([talker.text_eos_token, talker.text_pad_token], device=device)
        self.text_ends = embed(ids)
        codec_ids = torch.tensor([talker.codec_pad_token, talker.codec_bos_token], device=device)
        #: [2, hidden]: codec pad and bos embeddings, added to the last two prompt positions.
        self.codec_tail = talker.get_input_embeddings()(codec_ids)
        self.reply: ReplyBuffer | None = None

    def stages(self, reply: ReplyBuffer) -> SpeechStages:
        self.reply = reply
        dit = self.model.token2wav.code2wav_dit_model.config
        decoder = self.talker_stage(self.model.talker, reply, self.text_ends, dit.num_embeds + 1)
        codec = Token2WavDecoder(self.model.token2wav, self.speakers, **self.codec)
        max_len = self.model.config.talker_config.max_position_embeddings
        return SpeechStages(decoder=decoder, codec=codec, schedule=self.schedule, max_len=max_len)

    def prepare(self, state: TextState) -> ARState:
        import torch

        assert self.reply is not None
        data = state.data
        first, _ = self.reply.read([state.slot], [0])
        prompt = torch.cat(
            [data["talker_prompt"], data["speaker_bos"][None], first.to(data["speaker_bos"].dtype)]
        )
        prompt[-2:] = prompt[-2:] + self.codec_tail.to(prompt.dtype)
        settings: TalkerSettings = data["talker_settings"]
        talker = self.model.talker
        return ARState(
            request=state.request,
            data={
                "prompt": prompt,
                "positions": data["talker_positions"],
                "rope_delta": data["talker_rope_delta"],
                "chat_slot": state.slot,
                "talker": settings,
                "frame_tail": [data["speaker_index"], data["noise_seed"]],
                "prompt_codes": torch.tensor(
                    [talker.codec_mask_token, talker.codec_pad_token, talker.codec_bos_token]
                ),
            },
            max_frames=settings.max_frames,
            # a non-streamed answer is decoded whole, as transformers does
            schedule=None if state.request.stream else ChunkSchedule.whole(),
        )
