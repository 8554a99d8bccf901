"""The prompt stage of LTX-2: diffusers' own Gemma 3 encoding and text connectors for one
prompt, cached.

``LTX2Pipeline._get_gemma_prompt_embeds`` (the stripped prompt left-padded to
``max_sequence_length`` tokens, every hidden state of Gemma 3 stacked) runs on a view of this
encoder, so the numbers are the reference's; the connectors then make the video and audio
streams' text tokens and their mask. Both are row-independent, so one prompt encoded alone
equals its row of diffusers' [negative, positive] batch. A shared negative prompt is encoded
once.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from omni_core.diffusion import LRUCache

#: (video text tokens, audio text tokens, mask), one row each.
Prompt = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


class PromptEncoder:
    """diffusers' LTX-2 prompt encoding for one prompt, then the connectors, cached by text."""

    def __init__(
        self, components: dict[str, Any], device: Any, cache_size: int, max_length: int
    ) -> None:
        self.tokenizer = components["tokenizer"]
        self.text_encoder = components["text_encoder"]
        self.connectors = components["connectors"]
        self.device = device
        self.max_length = max_length
        self.cache = LRUCache(cache_size)

    @torch.no_grad()
    def encode(self, text: str | None, device: Any) -> Prompt:
        from diffusers import LTX2Pipeline as Reference

        text = text or ""  # diffusers encodes a missing negative prompt as ""
        cached = self.cache.get(text)
        if cached is not None:
            return cached
        view = SimpleNamespace(tokenizer=self.tokenizer, text_encoder=self.text_encoder)
        embeds, mask = Reference._get_gemma_prompt_embeds(
            view,  # type: ignore[arg-type]
            prompt=[text],
            max_sequence_length=self.max_length,
            device=self.device,
            dtype=self.text_encoder.dtype,
        )
        side = self.tokenizer.padding_side  # diffusers set it to "left" above
        video, audio, attention = self.connectors(embeds, mask, padding_side=side)
        value = tuple(t.to(device) for t in (video, audio, attention))
        self.cache.put(text, value)
        return value  # type: ignore[return-value]
