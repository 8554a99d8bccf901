"""``reference_generate``: one request, plain greedy loop, ``DynamicCache`` -- the ground truth.

Step for step what the official ``Qwen3TTSForConditionalGeneration.generate`` does with greedy
decoding: prefill the prompt; then per step pick codebook 0 from the processed logits (repetition
penalty over the codebook-0 tokens generated so far, control tokens suppressed, no EOS before the
2nd token), stop at EOS, else run the code predictor for codebooks 1..15, and feed the sum of the
16 codebook embeddings + that step's trailing text row back. ``max_new_tokens`` counts codebook-0
tokens as there: a run that never emits EOS yields ``max_new_tokens - 1`` frames (the last token
never gets its other codebooks). The waveform is the whole-utterance decode; for a Base ICL clone
the reference codes are decoded in front and their samples cut, as the official wrapper does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .prompt import TalkerPrompt


@dataclass
class ReferenceOutput:
    codes: torch.Tensor  # [16, T] long
    wav: np.ndarray  # [T * 1920] float32
    sample_rate: int
    prompt: TalkerPrompt


@torch.inference_mode()
def generate_codes(
    model: Any,
    prompt: TalkerPrompt,
    max_new_tokens: int = 2048,
    repetition_penalty: float = 1.05,
    min_new_tokens: int = 2,
) -> torch.Tensor:
    """The talker + code predictor loop for one prompt -> codes [16, T] long."""
    from transformers.cache_utils import DynamicCache

    device = model.device
    cache = DynamicCache()
    embeds = prompt.embeds.to(device)[None]
    length = embeds.shape[1]
    positions = torch.arange(length, device=device)[None]
    hidden, logits = model.talker_forward(embeds, positions, None, cache)
    hidden, logits = hidden[:, -1], logits[:, -1]
    seen = torch.zeros(logits.shape, dtype=torch.bool, device=device)
    frames: list[torch.Tensor] = []
    for step in range(max_new_tokens):
        scores = model.codec0_logits(logits, seen, step, repetition_penalty, min_new_tokens)
        code0 = scores.argmax(dim=-1)
        if int(code0) == model.codec_eos_id or step == max_new_tokens - 1:
            break
        seen[0, code0] = True
        codes = model.predict_codes(hidden, code0)
        frames.append(codes[0])
        text = prompt.text_for_step(step).to(device)[None]
        step_embeds = model.frame_embedding(codes, text)[:, None]
        position = torch.tensor([[length + step]], device=device)
        hidden, logits = model.talker_forward(step_embeds, position, None, cache)
        hidden, logits = hidden[:, -1], logits[:, -1]
    if not frames:
        return torch.zeros((model.num_code_groups, 0), dtype=torch.long, device=device)
    return torch.stack(frames, dim=1)


@torch.inference_mode()
def decode_waveform(
    model: Any, codes: torch.Tensor, ref_codes: torch.Tensor | None = None
) -> np.ndarray:
    """codes [16, T] -> float32 samples; ``ref_codes`` [16, R] are decoded in front and cut."""
    if ref_codes is None:
        full = codes
    else:
        full = torch.cat([ref_codes.to(codes.device), codes], dim=1)
    if full.shape[1] == 0:
        return np.zeros(0, dtype=np.float32)
    wav = model.codec.decode(full.to(model.device))
    if ref_codes is not None:
        cut = int(ref_codes.shape[1] / max(full.shape[1], 1) * wav.shape[0])
        wav = wav[cut:]
    return wav.float().cpu().numpy()


def reference_generate(
    model: Any,
    text: str,
    max_new_tokens: int | None = None,
    repetition_penalty: float | None = None,
    **request: Any,
) -> ReferenceOutput:
    """Greedy speech for one request -> :class:`ReferenceOutput` (codes [16, T], wav, rate).

    ``request``: what ``model.build_prompt`` takes (``speaker``, ``language``, ``instructions``,
    ``voice``, ``non_streaming``). ``repetition_penalty`` and ``max_new_tokens`` default to the
    checkpoint's ``generation_config.json`` (1.05 and 2048 when it has none), as in the official
    wrapper.
    """
    defaults = model.generation_defaults
    penalty = (
        repetition_penalty
        if repetition_penalty is not None
        else defaults.get("repetition_penalty", 1.05)
    )
    limit = max_new_tokens if max_new_tokens is not None else defaults.get("max_new_tokens", 2048)
    prompt = model.build_prompt(text, **request)
    codes = generate_codes(model, prompt, int(limit), float(penalty))
    wav = decode_waveform(model, codes, prompt.ref_codes)
    return ReferenceOutput(codes=codes.cpu(), wav=wav, sample_rate=model.sample_rate, prompt=prompt)
