"""VibeVoice's step as omni stages: the language model, then a diffusion head per frame.

One step of VibeVoice (transformers' ``VibeVoiceForConditionalGeneration.generate``) is

1. the Qwen2 language model over the previous step's input (:class:`VibeVoiceDecoder`, on the
   runtime's slot cache), whose head picks one of four tokens: speech (a frame of audio),
   speech start, speech end or the end of the answer;
2. for the rows that picked speech, the unconditional (negative) branch of classifier-free
   guidance, the same language model on its own :class:`~omni_core.runtime.SlotCache`, the
   diffusion head denoising one acoustic latent (DPM-Solver, seeded noise per request), the
   acoustic decoder making that latent's audio and the semantic encoder reading it back: their
   projections are the next step's input (:class:`VibeVoiceDiffusion`, a frame stage).

The audio of a frame is made inside the step (the model reads it back), so the frames the runtime
gathers are audio samples already and :class:`VibeVoiceAudio` only lays them end to end. Rows
whose token is not speech make no audio (``StepOutput.is_audio``).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch
from omni_core.runtime import SlotCache
from omni_core.speech import ARState, ChunkDecoder, DecoderStage, FrameStage, StepOutput
from transformers.models.vibevoice_acoustic_tokenizer.modeling_vibevoice_acoustic_tokenizer import (
    VibeVoiceAcousticTokenizerConv1dCacheLayer,
    VibeVoiceAcousticTokenizerConv1dPaddingCache,
)

if TYPE_CHECKING:  # pragma: no cover
    from transformers import VibeVoiceForConditionalGeneration


def _allowed_logits(model: VibeVoiceForConditionalGeneration) -> torch.Tensor:
    """0 for the four tokens the model may pick, -inf for the rest (as the reference's
    ``VibeVoiceTokenConstraintProcessor``)."""
    config = model.config
    mask = torch.full((config.vocab_size,), float("-inf"), device=model.device)
    allowed = [
        config.audio_bos_token_id,
        config.audio_eos_token_id,
        config.audio_token_id,
        config.eos_token_id,
    ]
    mask[allowed] = 0.0
    return mask


class VibeVoiceDecoder(DecoderStage):
    """The language model's step on the runtime's cache: the next token of every row.

    ``hidden`` of its output is the last hidden state (the diffusion head's condition). With a
    generation config whose ``guidance_scale`` is not 1, ``generate()`` also guides the token
    choice (transformers' ``UnbatchedClassifierFreeGuidanceLogitsProcessor``: the model over the
    tokens alone, from the prompt's last one, on a context of its own); so does this stage, on a
    second :class:`~omni_core.runtime.SlotCache`."""

    def __init__(
        self, model: VibeVoiceForConditionalGeneration, *, slots: int, max_len: int
    ) -> None:
        self.model = model
        self.allowed = _allowed_logits(model)
        scale = model.generation_config.guidance_scale
        self.guidance = None if scale is None or scale == 1 else float(scale)
        self.unconditional = SlotCache(slots, max_len, model.device) if self.guidance else None

    def _forward(self, embeds: torch.Tensor, cache: SlotCache) -> torch.Tensor:
        return self.model.model.language_model(
            inputs_embeds=embeds,
            attention_mask=cache.attention_mask(embeds.dtype),
            position_ids=cache.position_ids(),
            cache=cache,
            use_cache=True,
        ).last_hidden_state[:, -1]

    def _step(
        self, states: list[ARState], embeds: torch.Tensor, cache: SlotCache, previous: torch.Tensor
    ) -> StepOutput:
        hidden = self._forward(embeds, cache)
        logits = self.model.lm_head(hidden).float()
        if self.unconditional is not None and self.guidance is not None:
            self.unconditional.bind([s.slot for s in states], 1)
            alone = self._forward(
                self.model.get_input_embeddings()(previous)[:, None], self.unconditional
            )
            self.unconditional.advance()
            scores = torch.log_softmax(logits, -1)
            floor = torch.log_softmax(self.model.lm_head(alone).float(), -1)
            logits = self.guidance * (scores - floor) + floor
        token = (logits + self.allowed).argmax(-1)  # argmax whatever do_sample says, as generate()
        for state, row in zip(states, token, strict=True):
            state.data["token"] = row
        return StepOutput(
            tokens=token[:, None], stop=token == self.model.config.eos_token_id, hidden=hidden
        )

    def prefill(self, states: list[ARState], cache: SlotCache) -> StepOutput:
        if self.unconditional is not None:
            for state in states:  # the slot may hold an old request
                self.unconditional.reset_slot(state.slot)
        previous = torch.stack([s.data["prompt_last"] for s in states])
        return self._step(states, torch.stack([s.data["prompt"] for s in states]), cache, previous)

    def decode(self, states: list[ARState], last: StepOutput, cache: SlotCache) -> StepOutput:
        assert last.hidden is not None  # the next input the diffusion stage made
        previous = torch.stack([s.data["token"] for s in states])
        return self._step(states, last.hidden[:, None], cache, previous)


class _ConvStates:
    """A request's streaming states of one causal conv stack (transformers' padding cache, kept
    in ``ARState.data[name]``), stacked into one batch for a call and split back after it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def batch(self, states: list[ARState]) -> VibeVoiceAcousticTokenizerConv1dPaddingCache:
        cache = VibeVoiceAcousticTokenizerConv1dPaddingCache()
        known = [s.data[self.name] for s in states if self.name in s.data]
        if not known:
            return cache  # every row starts now: the layers start from zeros themselves
        for key, like in known[0].items():
            layer = VibeVoiceAcousticTokenizerConv1dCacheLayer()
            layer.cache = torch.cat(
                [
                    s.data[self.name][key] if self.name in s.data else torch.zeros_like(like)
                    for s in states
                ]
            )
            layer.left_pad, layer.in_channels = like.shape[2], like.shape[1]
            layer.is_initialized = True
            cache.layers[key] = layer
        return cache

    def keep(
        self, states: list[ARState], cache: VibeVoiceAcousticTokenizerConv1dPaddingCache
    ) -> None:
        for row, state in enumerate(states):
            state.data[self.name] = {k: v.cache[row : row + 1] for k, v in cache.layers.items()}


class VibeVoiceDiffusion(FrameStage):
    """A frame of audio for every row that picked speech, and every row's next input.

    Reads the tokens back to the host once per step: which rows diffuse decides the shapes of
    the negative branch and the codec calls (as it decides the reference's)."""

    def __init__(
        self,
        model: VibeVoiceForConditionalGeneration,
        scheduler: Any,
        *,
        slots: int,
        max_len: int,
    ) -> None:
        self.model, self.scheduler = model, scheduler
        self.negative = SlotCache(slots, max_len, model.device)
        self.acoustic, self.semantic = _ConvStates("acoustic"), _ConvStates("semantic")
        config = model.config
        self.speech, self.start = config.audio_token_id, config.audio_bos_token_id
        self.hop = config.audio_config.hop_length
        with torch.inference_mode():
            self.bos = model.get_input_embeddings()(
                torch.tensor([self.start], device=model.device)
            )[0]

    def _negative(self, states: list[ARState]) -> torch.Tensor:
        """The unconditional branch's last hidden state for ``states`` (rows that diffuse now).

        As the reference: it reads what the positive branch read this step (the speech-start
        token at the prompt's step); a speech-start token restarts it from an empty context."""
        groups: dict[int, list[int]] = {}
        inputs = []
        for row, state in enumerate(states):
            consumed = state.data["consumed"]
            inputs.append((self.bos if consumed is None else consumed)[None])
            groups.setdefault(1, []).append(row)
        hidden = torch.empty(
            len(states), self.bos.shape[-1], dtype=self.bos.dtype, device=self.bos.device
        )
        lm = self.model.model.language_model
        for length, rows in groups.items():
            slots = [states[r].slot for r in rows]
            for r in rows:
                if states[r].data["negative"] != "running":  # its slot may hold an old request
                    self.negative.reset_slot(states[r].slot)
                    states[r].data["negative"] = "running"
            self.negative.bind(slots, length)
            out = lm(
                inputs_embeds=torch.stack([inputs[r] for r in rows]),
                attention_mask=self.negative.attention_mask(self.bos.dtype),
                position_ids=self.negative.position_ids(),
                cache=self.negative,
                use_cache=True,
            ).last_hidden_state[:, -1]
            self.negative.advance()
            hidden[rows] = out
        return hidden

    def _latents(self, states: list[ARState], positive: torch.Tensor) -> torch.Tensor:
        """Denoise one acoustic latent per row with classifier-free guidance (the reference's
        ``_sample_audio_latent``, its noise drawn per request)."""
        negative = self._negative(states)
        condition = torch.cat([positive, negative])
        size = self.model.config.audio_config.hidden_size
        noise = [torch.randn(2, size, generator=s.data["generator"])[0] for s in states]
        latent = torch.stack(noise).to(condition)
        scheduler = copy.deepcopy(self.scheduler)
        scheduler.set_timesteps(num_inference_steps=self.steps_of(states))
        half = len(states)
        guidance = torch.tensor(
            [s.data["guidance"] for s in states], device=condition.device, dtype=condition.dtype
        )[:, None]
        head = self.model.model.diffusion_head
        for timestep in scheduler.timesteps:
            both = torch.cat([latent, latent])
            eps = head(both, timestep.repeat(both.shape[0]).to(both), condition=condition)
            cond, uncond = eps[:half], eps[half:]
            latent = scheduler.step(
                uncond + guidance * (cond - uncond), timestep, latent
            ).prev_sample
        return latent[:, None]

    @staticmethod
    def steps_of(states: list[ARState]) -> int:
        return int(states[0].data["diffusion_steps"])

    def run(self, states: list[ARState], out: StepOutput) -> StepOutput:
        assert out.hidden is not None
        tokens = out.tokens[:, 0]
        picked = tokens.tolist()  # the one host read of the step (see the class docstring)
        embeds = self.model.get_input_embeddings()(tokens)
        audio = torch.zeros(len(states), self.hop, dtype=torch.float32, device=tokens.device)
        for state, token in zip(states, picked, strict=True):
            if token == self.start:  # the guidance branch starts over at the next speech
                state.data["negative"] = "new"
        rows = [r for r, token in enumerate(picked) if token == self.speech]
        # one call per number of diffusion steps (the scheduler's timesteps are shared)
        by_steps: dict[int, list[int]] = {}
        for r in rows:
            by_steps.setdefault(int(states[r].data["diffusion_steps"]), []).append(r)
        for group in by_steps.values():
            chosen = [states[r] for r in group]
            latent = self._latents(chosen, out.hidden[group])
            model = self.model.model
            scaled = latent / model.latent_scaling_factor - model.latent_bias_factor
            acoustic = self.acoustic.batch(chosen)
            decoded = model.audio_tower.decode(scaled, padding_cache=acoustic, use_cache=True)
            self.acoustic.keep(chosen, decoded.padding_cache)
            semantic = self.semantic.batch(chosen)
            read = model.semantic_tokenizer_encoder(
                decoded.audio, padding_cache=semantic, use_cache=True
            )
            self.semantic.keep(chosen, read.padding_cache)
            embeds[group] = (
                model.multi_modal_projector(latent) + model.semantic_connector(read.latents)
            )[:, 0].to(embeds.dtype)
            audio[group] = decoded.audio[:, 0].float()
        for state, embed in zip(states, embeds, strict=True):
            state.data["consumed"] = embed
        is_audio = tokens == self.speech
        return StepOutput(tokens=audio, stop=out.stop, hidden=embeds, is_audio=is_audio)


class VibeVoiceAudio(ChunkDecoder):
    """The frames are audio already (made inside the step): lay them end to end."""

    left_context = 0

    def __init__(self, sample_rate: int, hop: int) -> None:
        self.sample_rate, self.samples_per_frame = sample_rate, hop

    def decode(self, codes: torch.Tensor, context: int) -> torch.Tensor:
        return codes[:, :, context:].transpose(1, 2).reshape(codes.shape[0], -1)
