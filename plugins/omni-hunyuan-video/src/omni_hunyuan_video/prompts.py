"""The prompt stage of HunyuanVideo-1.5: diffusers' own two encoders for one prompt, cached.

Qwen2.5-VL reads the system-prompted chat (the 108-token template cropped, 1000 tokens kept) and
ByT5 the prompt's quoted glyph text (zeros without any): both through diffusers'
``HunyuanVideo15Pipeline`` static methods with their defaults, so the numbers are the
reference's. A shared negative prompt is encoded once.
"""

from __future__ import annotations

from typing import Any

import torch

from omni_core.diffusion import LRUCache

#: (embeds, mask, glyph embeds, glyph mask), one row each, in the transformer's dtype.
Prompt = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


class PromptEncoder:
    """diffusers' ``HunyuanVideo15Pipeline.encode_prompt`` for one prompt (its two encoders'
    own static methods, with their defaults), cached by (text, dtype)."""

    def __init__(self, components: dict[str, Any], device: Any, cache_size: int) -> None:
        self.text_encoder, self.tokenizer = components["text_encoder"], components["tokenizer"]
        self.glyph_encoder, self.glyph_tokenizer = (
            components["text_encoder_2"],
            components["tokenizer_2"],
        )
        self.device = device
        self.cache = LRUCache(cache_size)

    @torch.no_grad()
    def encode(self, text: str | None, dtype: torch.dtype, device: Any) -> Prompt:
        from diffusers import HunyuanVideo15Pipeline as Reference

        text = text or ""  # diffusers encodes a missing negative prompt as ""
        key = (text, dtype)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        embeds, mask = Reference._get_mllm_prompt_embeds(
            text_encoder=self.text_encoder,
            tokenizer=self.tokenizer,
            prompt=[text],
            device=self.device,
        )
        glyphs, glyph_mask = Reference._get_byt5_prompt_embeds(
            tokenizer=self.glyph_tokenizer,
            text_encoder=self.glyph_encoder,
            prompt=[text],
            device=self.device,
        )
        value = tuple(t.to(dtype=dtype, device=device) for t in (embeds, mask, glyphs, glyph_mask))
        self.cache.put(key, value)
        return value  # type: ignore[return-value]
