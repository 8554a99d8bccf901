"""Qwen3-TTS (12 Hz codec; CustomVoice, VoiceDesign, Base) on transformers 5 building blocks.

omni's own implementation of the official `qwen-tts` 0.1.1 architecture, loading the official
checkpoint layout (``config.json``, ``model.safetensors``, ``generation_config.json``, the Qwen2
tokenizer files and the ``speech_tokenizer/`` folder). ``qwen-tts`` itself is never imported: it is
only the fidelity oracle (``tox -e oracle-qwen-tts`` in plugins/omni-qwen).

The model is exposed in parts so that an autoregressive runtime can drive it step by step with its
own batching and KV cache. Everything below is on :class:`Qwen3TTSModel` (``model`` here), loaded
with ``Qwen3TTSModel.from_pretrained(path_or_hub_id, device=..., dtype=...)``.

Facts
    ``model.kind``: ``"custom_voice"`` | ``"voice_design"`` | ``"base"``;
    ``model.speakers`` (names, CustomVoice only), ``model.languages`` (``"auto"`` first);
    ``model.supports_instructions`` (False for 0.6B CustomVoice and for Base);
    ``model.num_code_groups`` (16), ``model.sample_rate`` (24000), ``model.samples_per_frame``
    (1920: one frame of 16 codes is 80 ms), ``model.hidden_size``, ``model.codec_eos_id``,
    ``model.generation_defaults`` (generation_config.json).

Prompt (one request)
    ``voice = model.prepare_voice(wav, sr, ref_text=None, x_vector_only=False)`` (Base only) ->
    :class:`VoicePrompt` (``speaker_embedding`` [D]; ``ref_codes`` [16, R] long or None for
    x-vector-only; ``ref_text``). Cache it: it is what a stored voice keeps.
    ``prompt = model.build_prompt(text, speaker=None, language="auto", instructions=None,
    voice=None, non_streaming=None)`` -> :class:`TalkerPrompt`: ``embeds`` [T, H] (the prefill
    input), ``trailing`` [N, H] (text embeddings fed one per decode step, in order), ``pad`` [H]
    (fed once ``trailing`` is used up), ``ref_codes`` (Base ICL: [16, R], the codec's left context
    for the first chunk, else None). Bad input (unknown speaker/language, instructions the model
    can't honour, ref audio on a non-Base model) raises :class:`Qwen3TTSInputError` (a ValueError).

Talker (codebook 0), any batch, runtime-owned cache
    ``hidden, logits = model.talker_forward(inputs_embeds [B, S, H], position_ids [B, S],
    attention_mask, cache)``: ``attention_mask`` is None (causal, no padding) or a 4D [B, 1, S, K]
    mask, bool (True = attend) or additive float, over the K = past + S keys the cache returns;
    ``cache`` is any ``transformers.Cache`` (its ``update(k, v, layer_idx, ...)`` is called once
    per layer, layers 0..L-1) or None. ``hidden`` [B, S, H] is the final-norm hidden state (the
    code predictor's input), ``logits`` [B, S, V] the raw codebook-0 logits.
    ``model.codec0_logits(logits [B, V], seen [B, V] bool, steps [B] long, repetition_penalty)``
    applies what the official generate applies to them (repetition penalty over the tokens already
    generated, the control-token suppression, no EOS before 2 tokens); ``seen`` is kept by the
    caller (``seen.scatter_(1, tok[:, None], True)``); greedy = ``argmax``. No host sync inside.

Code predictor (codebooks 1..15), batched over frames, its own short cache
    ``codes = model.predict_codes(hidden [B, H], code0 [B], sampler=None)`` -> [B, 16] long
    (code0 first). ``sampler(logits [B, vocab], group) -> [B]`` defaults to argmax.
    ``model.frame_embedding(codes [B, 16], text [B, H]) -> [B, H]``: the talker's next input
    (sum of the 16 codebook embeddings + that step's trailing text row, or ``prompt.pad``).

Codec (speech tokenizer, 12 Hz), ``model.codec``
    ``decode(codes [B, 16, T]) -> wav [B, T * 1920]`` float in [-1, 1] (the official chunking);
    ``decode_chunk(codes [B, 16, C + T], context=C) -> wav [B, T * 1920]`` decodes new frames
    with C frames of left context (streaming; equal to whole decoding once C covers the decoder's
    receptive field, within float tolerance); ``encode(wav [N], sr) -> codes [16, T]``.
Speaker encoder (Base), ``model.speaker_encoder.embed(wav [N], sr) -> x-vector [D]``.

Ground truth
    ``reference_generate(model, text, ...)`` (:mod:`.reference`): one request, DynamicCache, greedy,
    the official loop step for step -> ``ReferenceOutput(codes [16, T], wav [N], sample_rate)``.
    A runtime's batched output must give equal codes.

Tiny checkpoints: ``omni_qwen.testing.build_tiny_qwen3_tts(path, kind)`` saves random weights in
the official layout (real field and key names, tokenizer files, speech_tokenizer/), no network.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model import Qwen3TTSModel
    from .prompt import Qwen3TTSInputError, TalkerPrompt, VoicePrompt
    from .reference import ReferenceOutput, reference_generate

__all__ = [
    "Qwen3TTSInputError",
    "Qwen3TTSModel",
    "ReferenceOutput",
    "TalkerPrompt",
    "VoicePrompt",
    "reference_generate",
]

_LAZY = {
    "Qwen3TTSModel": "model",
    "Qwen3TTSInputError": "prompt",
    "TalkerPrompt": "prompt",
    "VoicePrompt": "prompt",
    "ReferenceOutput": "reference",
    "reference_generate": "reference",
}


def __getattr__(name: str) -> Any:
    """Import the heavy (torch) modules only when a name is used."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
