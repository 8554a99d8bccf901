"""Z-Image's prompt encoder (diffusers' ``ZImagePipeline._encode_prompt``) behind a small LRU
cache, so a shared negative prompt is encoded once."""

from __future__ import annotations

from typing import Any

import torch

from omni_core.diffusion import LRUCache


class PromptEncoder:
    """diffusers' ``ZImagePipeline._encode_prompt`` for one prompt, cached by (text, length)."""

    def __init__(self, text_encoder: Any, tokenizer: Any, device: Any, cache_size: int) -> None:
        self.text_encoder, self.tokenizer, self.device = text_encoder, tokenizer, device
        self.cache = LRUCache(cache_size)

    @torch.no_grad()
    def encode(self, text: str, max_length: int) -> torch.Tensor:
        key = (text, max_length)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        formatted = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}],
            tokenize=False,
            add_generation_prompt=True,
            enable_thinking=True,
        )
        tokens = self.tokenizer(
            [formatted],
            padding="max_length",
            max_length=max_length,
            truncation=True,
            return_tensors="pt",
        )
        ids = tokens.input_ids.to(self.device)
        mask = tokens.attention_mask.to(self.device).bool()
        hidden = self.text_encoder(
            input_ids=ids, attention_mask=mask, output_hidden_states=True
        ).hidden_states[-2]
        embeds = hidden[0][mask[0]]
        self.cache.put(key, embeds)
        return embeds
