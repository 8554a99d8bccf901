"""FLUX.1's prompt encoders: CLIP's pooled embedding and T5's sequence, as diffusers'
``FluxPipeline.encode_prompt`` computes them, kept in a small LRU cache.

Repeating a prompt (a negative prompt shared by many requests, a seed sweep) skips both
encoders; hits are counted for the timings a result reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from omni_core.diffusion import LRUCache


@dataclass(frozen=True)
class PromptEmbeds:
    """One encoded prompt: T5's ``[1, L, D]`` sequence and CLIP's ``[1, P]`` pooled vector."""

    sequence: torch.Tensor
    pooled: torch.Tensor


class FluxPromptEncoder:
    """CLIP (pooled) + T5 (sequence) of one pipeline, on the device they run on."""

    def __init__(
        self, components: dict[str, Any], device: Any, encoder_device: Any, cache_size: int
    ) -> None:
        self.tokenizer = components["tokenizer"]
        self.tokenizer_2 = components["tokenizer_2"]
        self.text_encoder = components["text_encoder"]
        self.text_encoder_2 = components["text_encoder_2"]
        self.device = device
        self.encoder_device = encoder_device
        self.cache = LRUCache(cache_size)

    def encode(self, prompt: str, prompt_2: str | None, max_sequence_length: int) -> PromptEmbeds:
        """The embeddings of one prompt (``prompt_2``: T5's text, default ``prompt``)."""
        key = (prompt, prompt_2 or prompt, max_sequence_length, str(self.device))
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        clip = self.tokenizer(
            [prompt],
            padding="max_length",
            max_length=self.tokenizer.model_max_length,
            truncation=True,
            return_tensors="pt",
        )
        pooled = self.text_encoder(
            clip.input_ids.to(self.encoder_device), output_hidden_states=False
        ).pooler_output
        t5 = self.tokenizer_2(
            [prompt_2 or prompt],
            padding="max_length",
            max_length=max_sequence_length,
            truncation=True,
            return_tensors="pt",
        )
        sequence = self.text_encoder_2(
            t5.input_ids.to(self.encoder_device), output_hidden_states=False
        )[0]
        embeds = PromptEmbeds(
            sequence=sequence.to(device=self.device, dtype=self.text_encoder_2.dtype),
            pooled=pooled.to(device=self.device, dtype=self.text_encoder.dtype),
        )
        self.cache.put(key, embeds)
        return embeds
