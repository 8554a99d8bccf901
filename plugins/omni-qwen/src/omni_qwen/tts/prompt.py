"""Talker prompts for the three kinds, in the official token layout.

Text side: the Qwen chat frame
``<|im_start|>assistant\\n{text}<|im_end|>\\n<|im_start|>assistant\\n``
(instructions as a ``<|im_start|>user\\n{instructions}<|im_end|>\\n`` turn before it; a clone's
reference transcript as ``<|im_start|>assistant\\n{ref_text}<|im_end|>\\n``), projected into the
talker's width. Codec side, summed position by position with the text: a think/language tag
(``think, think_bos, language, think_eos``, or ``nothink, think_bos, think_eos`` for "auto"), the
speaker (a speaker-token embedding for CustomVoice, the x-vector for Base, none for VoiceDesign),
``pad``, ``bos``. Then either the whole text at once (non-streaming: the prompt holds every text
token, the decode steps get ``tts_pad``) or only its first token (streaming: the rest, then
``tts_eos``, are fed one per decode step); a Base ICL prompt instead lines the reference transcript
+ text up against the reference codes. Each embedding call mirrors the official one, batch shape
included, so the prompt is bit-identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


class Qwen3TTSInputError(ValueError):
    """A request this model can't honour (unknown speaker or language, instructions...)."""


@dataclass
class VoicePrompt:
    """A prepared clone voice: what a stored voice keeps (Base models)."""

    speaker_embedding: torch.Tensor  # [D] x-vector
    ref_codes: torch.Tensor | None  # [16, R] long, None in x-vector-only mode
    ref_text: str | None = None

    @property
    def x_vector_only(self) -> bool:
        return self.ref_codes is None


@dataclass
class TalkerPrompt:
    embeds: torch.Tensor  # [T, H]: the prefill input
    trailing: torch.Tensor  # [N, H]: fed one per decode step, then `pad`
    pad: torch.Tensor  # [H]
    ref_codes: torch.Tensor | None = None  # [16, R]: codec left context of an ICL clone

    def text_for_step(self, step: int) -> torch.Tensor:
        """The text row added to decode step ``step``'s input (0-based)."""
        return self.trailing[step] if step < self.trailing.shape[0] else self.pad


def chat_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def ref_chat_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n"


def instruct_chat_text(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n"


class PromptBuilder:
    """Builds :class:`TalkerPrompt` s for one loaded model (``model.build_prompt`` calls this)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.cfg = model.config
        self.talker = model.talker

    def _ids(self, text: str) -> torch.Tensor:
        ids = self.model.tokenizer(text, add_special_tokens=False)["input_ids"]
        return torch.tensor([ids], dtype=torch.long, device=self.model.device)

    def _codec(self, ids: list[int]) -> torch.Tensor:
        return self.talker.embed_codec(
            torch.tensor([ids], dtype=torch.long, device=self.model.device)
        )

    def language_id(self, language: str | None, speaker: str | None) -> int | None:
        tc = self.cfg.talker
        lang = (language or "auto").lower()
        if lang not in self.model.languages:  # dialects come only with their speakers
            raise Qwen3TTSInputError(
                f"language {language!r} is not supported; "
                f"supported: {', '.join(self.model.languages)}"
            )
        lang_id = None if lang == "auto" else int(tc.codec_language_id[lang])
        if speaker and lang in ("chinese", "auto"):
            dialect = tc.spk_is_dialect.get(speaker.lower(), False)
            if dialect is not False and dialect in tc.codec_language_id:
                lang_id = int(tc.codec_language_id[dialect])
        return lang_id

    def check(
        self, text: str, speaker: str | None, instructions: str | None, voice: VoicePrompt | None
    ) -> None:
        kind = self.cfg.kind
        if not text or not text.strip():
            raise Qwen3TTSInputError("text is empty")
        if instructions and not self.model.supports_instructions:
            why = (
                "Base models clone a voice"
                if kind == "base"
                else "the 0.6B CustomVoice model has none"
            )
            raise Qwen3TTSInputError(f"this model does not take instructions ({why})")
        if kind == "base":
            if voice is None:
                raise Qwen3TTSInputError("a Base model needs a reference voice (ref_audio)")
            if speaker:
                raise Qwen3TTSInputError(
                    "a Base model has no named speakers; pass a reference voice"
                )
        elif voice is not None:
            raise Qwen3TTSInputError(f"reference audio needs a Base model; this one is {kind}")
        if kind == "custom_voice":
            if not speaker:
                raise Qwen3TTSInputError(
                    f"a CustomVoice model needs a speaker: {', '.join(self.model.speakers)}"
                )
            if speaker.lower() not in self.cfg.talker.spk_id:
                raise Qwen3TTSInputError(
                    f"unknown speaker {speaker!r}; this model has: {', '.join(self.model.speakers)}"
                )
        if kind == "voice_design" and speaker:
            raise Qwen3TTSInputError(
                "a VoiceDesign model has no named speakers; describe the voice in instructions"
            )

    @torch.inference_mode()
    def build(self, text, speaker, language, instructions, voice, non_streaming) -> TalkerPrompt:
        """The arguments of ``Qwen3TTSModel.build_prompt`` (all given)."""
        self.check(text, speaker, instructions, voice)
        cfg, tc, talker = self.cfg, self.cfg.talker, self.talker
        if non_streaming is None:
            non_streaming = cfg.kind != "base"
        lang_id = self.language_id(language, speaker)
        ids = self._ids(chat_text(text))
        parts: list[torch.Tensor] = []
        if instructions:
            parts.append(talker.embed_text(self._ids(instruct_chat_text(instructions))))
        special = torch.tensor(
            [[cfg.tts_bos_token_id, cfg.tts_eos_token_id, cfg.tts_pad_token_id]], device=ids.device
        )
        tts_bos, tts_eos, tts_pad = talker.embed_text(special).chunk(3, dim=1)
        if lang_id is None:
            tag = self._codec([tc.codec_nothink_id, tc.codec_think_bos_id, tc.codec_think_eos_id])
        else:
            tag = self._codec(
                [tc.codec_think_id, tc.codec_think_bos_id, lang_id, tc.codec_think_eos_id]
            )
        tail = self._codec([tc.codec_pad_id, tc.codec_bos_id])
        codec = [tag]
        if voice is not None:
            codec.append(voice.speaker_embedding.to(tag.device, tag.dtype).view(1, 1, -1))
        elif speaker:
            spk = torch.tensor(tc.spk_id[speaker.lower()], device=ids.device)
            codec.append(talker.embed_codec(spk).view(1, 1, -1))
        codec.append(tail)
        codec_embed = torch.cat(codec, dim=1)
        role = talker.embed_text(ids[:, :3])
        lead = (
            torch.cat((tts_pad.expand(-1, codec_embed.shape[1] - 2, -1), tts_bos), dim=1)
            + codec_embed[:, :-1]
        )
        prompt = torch.cat((role, lead), dim=1)
        ref_codes = None
        if voice is not None and voice.ref_codes is not None:
            ref_codes = voice.ref_codes
            body, trailing = self._icl(ids, voice, tts_pad, tts_eos, non_streaming)
            prompt = torch.cat([prompt, body], dim=1)
        else:
            first = talker.embed_text(ids[:, 3:4]) + codec_embed[:, -1:]
            if non_streaming:
                text_ids = ids[:, 3:-5]
                pads = self._codec([tc.codec_pad_id] * (text_ids.shape[1] + 1))
                body = torch.cat((talker.embed_text(text_ids), tts_eos), dim=1) + pads
                prompt = torch.cat([prompt, body, tts_pad + self._codec([tc.codec_bos_id])], dim=1)
                trailing = tts_pad
            else:
                prompt = torch.cat([prompt, first], dim=1)
                trailing = torch.cat((talker.embed_text(ids[:, 4:-5]), tts_eos), dim=1)
        parts.append(prompt)
        embeds = torch.cat(parts, dim=1)[0]
        trailing_rows = trailing[0] if trailing is not tts_pad else trailing[0, :0]
        return TalkerPrompt(
            embeds=embeds, trailing=trailing_rows, pad=tts_pad[0, 0], ref_codes=ref_codes
        )

    def _icl(self, ids, voice: VoicePrompt, tts_pad, tts_eos, non_streaming: bool):
        talker, tc = self.talker, self.cfg.talker
        ref_ids = self._ids(ref_chat_text(voice.ref_text or ""))[:, 3:-2]
        text_embed = talker.embed_text(torch.cat([ref_ids, ids[:, 3:-5]], dim=-1))
        text_embed = torch.cat([text_embed, tts_eos], dim=1)
        codes = voice.ref_codes.to(ids.device).transpose(0, 1)  # [R, 16]
        codec_embed = talker.sum_codebooks(codes)[None]
        codec_embed = torch.cat([self._codec([tc.codec_bos_id]), codec_embed], dim=1)
        n_text, n_codec = text_embed.shape[1], codec_embed.shape[1]
        if non_streaming:
            body = text_embed + self._codec([tc.codec_pad_id] * n_text)
            return torch.cat([body, codec_embed + tts_pad], dim=1), tts_pad
        if n_text > n_codec:
            return text_embed[:, :n_codec] + codec_embed, text_embed[:, n_codec:]
        text_embed = torch.cat([text_embed] + [tts_pad] * (n_codec - n_text), dim=1)
        return text_embed + codec_embed, tts_pad
