"""``Qwen3TTSModel``: one loaded Qwen3-TTS checkpoint, exposed in the parts a runtime drives.

See the package docstring (:mod:`omni_qwen.tts`) for the interface. Loading: ``from_pretrained``
reads the official layout (:mod:`.loading`); the talker is built on the meta device and its
weights assigned, so a 1.7B model is not randomly initialised first.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch
from torch import nn

from .config import Qwen3TTSConfig, SpeechTokenizerConfig
from .prompt import PromptBuilder, Qwen3TTSInputError, TalkerPrompt, VoicePrompt


class Qwen3TTSModel(nn.Module):
    def __init__(
        self,
        config: Qwen3TTSConfig,
        codec_config: SpeechTokenizerConfig,
        tokenizer: Any,
        generation_defaults: dict[str, Any] | None = None,
        attn_implementation: str = "sdpa",
    ) -> None:
        super().__init__()
        self._build_parts(
            config, codec_config, tokenizer, generation_defaults, attn_implementation, meta=False
        )

    # -- facts ------------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        return self.config.kind

    @property
    def device(self) -> torch.device:
        return self.talker.codec_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.talker.codec_head.weight.dtype

    @property
    def speakers(self) -> list[str]:
        return sorted(self.config.talker.spk_id) if self.kind == "custom_voice" else []

    @property
    def languages(self) -> list[str]:
        names = [k for k in self.config.talker.codec_language_id if "dialect" not in k]
        return ["auto", *names]

    @property
    def supports_instructions(self) -> bool:
        if self.kind == "voice_design":
            return True
        return self.kind == "custom_voice" and self.config.model_size.lower() != "0b6"

    @property
    def num_code_groups(self) -> int:
        return self.config.talker.num_code_groups

    @property
    def hidden_size(self) -> int:
        return self.config.talker.dims.hidden_size

    @property
    def codec_eos_id(self) -> int:
        return self.config.talker.codec_eos_token_id

    @property
    def sample_rate(self) -> int:
        return self.codec.sample_rate

    @property
    def samples_per_frame(self) -> int:
        return self.codec.samples_per_frame

    # -- prompts ----------------------------------------------------------------------------
    def prepare_voice(
        self, wav: Any, sr: int, ref_text: str | None = None, x_vector_only: bool = False
    ) -> VoicePrompt:
        """Reference audio (+ transcript) -> the clone prompt a Base model conditions on."""
        if self.speaker_encoder is None:
            raise Qwen3TTSInputError(f"reference audio needs a Base model; this one is {self.kind}")
        if not x_vector_only and not (ref_text and ref_text.strip()):
            raise Qwen3TTSInputError(
                "cloning from reference audio needs its transcript (ref_text), "
                "or x-vector-only mode"
            )
        wav = torch.as_tensor(wav, dtype=torch.float32).reshape(-1)
        if wav.numel() < sr // 10:
            raise Qwen3TTSInputError("reference audio is shorter than 0.1 s")
        embedding = self.speaker_encoder.embed(wav, sr)
        codes = None if x_vector_only else self.codec.encode(wav, sr).to(torch.long)
        return VoicePrompt(
            speaker_embedding=embedding,
            ref_codes=codes,
            ref_text=None if x_vector_only else ref_text,
        )

    def build_prompt(
        self,
        text: str,
        speaker: str | None = None,
        language: str | None = "auto",
        instructions: str | None = None,
        voice: VoicePrompt | None = None,
        non_streaming: bool | None = None,
    ) -> TalkerPrompt:
        """One request's talker prompt (:mod:`.prompt`); ``non_streaming`` None is the official
        wrapper's default (whole text in the prompt, except for Base clones)."""
        return self._prompts.build(text, speaker, language, instructions, voice, non_streaming)

    # -- talker -----------------------------------------------------------------------------
    def talker_forward(self, inputs_embeds, position_ids, attention_mask=None, cache=None):
        """-> (final-norm hidden [B, S, H], codebook-0 logits [B, S, V]); see
        :meth:`.blocks.DecoderStack.forward` for the mask and cache."""
        return self.talker(inputs_embeds, position_ids, attention_mask, cache)

    def codec0_logits(
        self,
        logits: torch.Tensor,
        seen: torch.Tensor | None,
        steps: torch.Tensor | int,
        repetition_penalty: float = 1.0,
        min_new_tokens: int | torch.Tensor = 2,
    ) -> torch.Tensor:
        """The official logits processing for codebook 0 (float32 out): repetition penalty over
        ``seen`` tokens, control tokens suppressed, EOS suppressed while
        ``steps < min_new_tokens``."""
        scores = logits.float()
        if seen is not None and repetition_penalty != 1.0:
            penalised = torch.where(
                scores < 0, scores * repetition_penalty, scores / repetition_penalty
            )
            scores = torch.where(seen, penalised, scores)
        if self._suppressed is None or self._suppressed.device != scores.device:
            self._suppressed = self.talker.suppressed_tokens().to(scores.device)
        scores = scores.masked_fill(self._suppressed, float("-inf"))
        steps_t = torch.as_tensor(steps, device=scores.device).reshape(-1, 1)
        early = (steps_t < min_new_tokens).expand(scores.shape[0], 1)
        eos = scores[:, self.codec_eos_id : self.codec_eos_id + 1]
        scores = scores.clone()
        scores[:, self.codec_eos_id : self.codec_eos_id + 1] = torch.where(
            early, float("-inf"), eos
        )
        return scores

    # -- code predictor ---------------------------------------------------------------------
    def predict_codes(
        self, hidden: torch.Tensor, code0: torch.Tensor, sampler: Any = None, cache: Any = None
    ) -> torch.Tensor:
        """hidden [B, H], code0 [B] -> the frame's codes [B, G] (code0 first)."""
        rest = self.talker.code_predictor.predict(
            hidden, self.talker.embed_codec(code0), sampler, cache
        )
        return torch.cat([code0[:, None], rest], dim=1)

    def frame_embedding(self, codes: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        return self.talker.frame_embedding(codes, text)

    # -- loading ----------------------------------------------------------------------------
    @classmethod
    def from_pretrained(
        cls,
        source: str | os.PathLike[str],
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        revision: str | None = None,
        cache_dir: str | None = None,
        attn_implementation: str = "sdpa",
    ) -> Qwen3TTSModel:
        from .loading import (
            CheckpointError,
            load_strict,
            load_tokenizer,
            read_json,
            read_safetensors,
            resolve_checkpoint,
        )
        from .speech_tokenizer import to_module_keys

        folder = resolve_checkpoint(source, revision, cache_dir)
        config = Qwen3TTSConfig.from_dict(read_json(folder / "config.json"))
        codec_config = SpeechTokenizerConfig.from_dict(
            read_json(folder / "speech_tokenizer" / "config.json")
        )
        if codec_config.decoder.num_quantizers != config.talker.num_code_groups:
            raise CheckpointError(
                f"{folder}: the talker makes {config.talker.num_code_groups} codebooks, "
                f"the speech tokenizer decodes {codec_config.decoder.num_quantizers}"
            )
        generation = read_json(folder / "generation_config.json", required=False)
        tokenizer = load_tokenizer(folder)
        device = torch.device(device)
        model = cls.__new__(cls)
        nn.Module.__init__(model)
        model._build_parts(
            config, codec_config, tokenizer, generation, attn_implementation, meta=True
        )
        state = read_safetensors(folder)
        load_strict(
            model.talker,
            _strip(state, "talker."),
            f"{folder}/model.safetensors (talker)",
            assign=True,
        )
        if model.speaker_encoder is not None:
            load_strict(
                model.speaker_encoder,
                _strip(state, "speaker_encoder."),
                f"{folder} (speaker_encoder)",
                assign=True,
            )
        codec_state = to_module_keys(read_safetensors(folder / "speech_tokenizer"))
        load_strict(model.codec, codec_state, f"{folder}/speech_tokenizer", assign=True)
        model.talker.reset_rotary()  # its buffers were on the meta device
        return model.to_device(device, dtype).eval().requires_grad_(False)

    def to_device(self, device: str | torch.device, dtype: torch.dtype) -> Qwen3TTSModel:
        """``.to(device, dtype)`` keeping every RoPE inverse-frequency buffer in float32."""
        saved = [
            (m, m.inv_freq.float().clone())
            for m in self.modules()
            if isinstance(getattr(m, "inv_freq", None), torch.Tensor)
        ]
        self.to(device=device, dtype=dtype)
        for module, inv_freq in saved:
            module.inv_freq = inv_freq.to(device)
        self._suppressed = None
        return self

    def _build_parts(
        self, config, codec_config, tokenizer, generation, attn_implementation, meta: bool
    ) -> None:
        """Build the parts; with ``meta`` the talker and speaker encoder go on the meta device
        (their weights come from the checkpoint); the speech tokenizer is always built for real
        (Mimi keeps computed buffers)."""
        from .speaker import SpeakerEncoder
        from .speech_tokenizer import SpeechTokenizer
        from .talker import Talker

        self.config = config
        self.tokenizer = tokenizer
        self.generation_defaults = dict(generation or {})
        with torch.device("meta") if meta else contextlib.nullcontext():
            self.talker = Talker(config.talker, attn_implementation)
            self.speaker_encoder = (
                SpeakerEncoder(config.speaker_encoder) if config.kind == "base" else None
            )
        self.codec = SpeechTokenizer(codec_config, attn_implementation)
        self._prompts = PromptBuilder(self)
        self._suppressed = None


def _strip(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
