"""Tiny random VibeVoice checkpoints in the official layout, for tests and benchmarks.

:func:`build_tiny_vibevoice` writes what ``vibevoice/VibeVoice-1.5B-hf`` holds (``config.json``
with ``VibeVoiceForConditionalGeneration``, ``model.safetensors``, ``generation_config.json``, the
processor's files and its chat template) at a tiny size, from transformers' own classes with
seeded random weights, offline: the byte-level BPE tokenizer is trained in-process on a few words.
:func:`reference_audio` is transformers' ``generate()`` on it, what the pipeline must equal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The processor's chat template, in the official prompt format: a system line, the speakers'
#: voice prompts (one audio placeholder each), the script one line per turn, then the start of
#: the speech output.
CHAT_TEMPLATE = (
    "{{- ' Transform the text provided by various speakers into speech output, utilizing the"
    " distinct voice of each respective speaker.\\n' -}}"
    "{%- set ns = namespace(voices=false) -%}"
    "{%- for message in messages -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'audio' -%}{%- set ns.voices = true -%}{%- endif -%}"
    "{%- endfor -%}{%- endfor -%}"
    "{%- if ns.voices -%}{{- ' Voice input:\\n' -}}"
    "{%- for message in messages -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'audio' -%}"
    "{{- ' Speaker ' ~ message['role'] ~ ':<|vision_start|><|vision_pad|><|vision_end|>\\n' -}}"
    "{%- endif -%}{%- endfor -%}{%- endfor -%}{%- endif -%}"
    "{{- ' Text input:\\n' -}}"
    "{%- for message in messages -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}"
    "{{- ' Speaker ' ~ message['role'] ~ ': ' ~ part['text'] ~ '\\n' -}}"
    "{%- endif -%}{%- endfor -%}{%- endfor -%}"
    "{{- ' Speech output:\\n<|vision_start|>' -}}"
)

WORDS = ("Speaker", "Transform", "text", "speech", "voice", "Hello", "there", "sentence", "Hi")
SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
)


def _tokenizer(specials: tuple[str, ...] = SPECIALS) -> Any:
    """A byte-level BPE Qwen2 tokenizer trained in-process (milliseconds, no network); the
    special tokens take the ids 0.. in the order of ``specials``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator([" ".join(WORDS)] * 4, trainer)
    return Qwen2TokenizerFast(
        tokenizer_object=core,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        additional_special_tokens=[t for t in specials if t != "<|endoftext|>"],
    )


def tiny_config(tokenizer: Any, ratios: tuple[int, ...] = (2, 2, 4)) -> Any:
    """The VibeVoice config at a tiny size (the official architecture, every part smaller;
    ``ratios``: the codec's downsampling, whose product is the samples of a frame)."""
    from transformers import VibeVoiceConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIALS}
    codec = {
        "hidden_size": 8,
        "num_filters": 4,
        "downsampling_ratios": list(ratios),
        "depths": [1] * (len(ratios) + 1),
        "kernel_size": 7,
    }
    return VibeVoiceConfig(
        text_config={
            "model_type": "qwen2",
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 1024,
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-6,
        },
        audio_config={"model_type": "vibevoice_acoustic_tokenizer", **codec},
        semantic_model_config={
            "model_type": "vibevoice_acoustic_tokenizer_encoder",
            **codec,
            "hidden_size": 16,
        },
        diffusion_head_config={
            "num_hidden_layers": 2,
            "intermediate_size": 64,
            "frequency_embedding_size": 32,
        },
        pad_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|endoftext|>"],
        audio_bos_token_id=ids["<|vision_start|>"],
        audio_eos_token_id=ids["<|vision_end|>"],
        audio_token_id=ids["<|vision_pad|>"],
        architectures=["VibeVoiceForConditionalGeneration"],
    )


def generation_config(config: Any, *, max_new_tokens: int) -> Any:
    """The generation config of the official checkpoints (guidance 1.3, 10 DPM-Solver steps)."""
    from transformers import GenerationConfig

    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        guidance_scale=1.3,
        num_diffusion_steps=10,
        noise_scheduler_class="DPMSolverMultistepScheduler",
        noise_scheduler_config={
            "beta_schedule": "squaredcos_cap_v2",
            "prediction_type": "v_prediction",
        },
        pad_token_id=config.pad_token_id,
        eos_token_id=config.eos_token_id,
    )


def save_processor(path: Path, tokenizer: Any, config: Any) -> None:
    """The processor's files (feature extractor, tokenizer, chat template) as the Hub has them."""
    from transformers import VibeVoiceAcousticTokenizerFeatureExtractor, VibeVoiceProcessor

    extractor = VibeVoiceAcousticTokenizerFeatureExtractor(
        sampling_rate=24000, pad_to_multiple_of=config.audio_config.hop_length
    )
    VibeVoiceProcessor(extractor, tokenizer, chat_template=CHAT_TEMPLATE).save_pretrained(path)


def build_tiny_vibevoice(
    path: Path | str, *, seed: int = 0, ratios: tuple[int, ...] = (2, 2, 4)
) -> Path:
    """Write a tiny random VibeVoice checkpoint in the official layout to ``path`` (``ratios``:
    the codec's downsampling; a longer frame makes a voice prompt fewer tokens)."""
    import torch
    from transformers import VibeVoiceForConditionalGeneration

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer()
    config = tiny_config(tokenizer, ratios)
    torch.manual_seed(seed)
    model = VibeVoiceForConditionalGeneration(config).eval()
    with torch.no_grad():  # random weights at a scale where the head's choices vary
        for name, param in model.named_parameters():
            if "norm" not in name and param.dim() > 1:
                param.normal_(0.0, 0.2)
    model.generation_config = generation_config(config, max_new_tokens=64)
    model.save_pretrained(path)
    save_processor(path, tokenizer, config)
    return path


def reference_audio(
    path: Path | str, input_ids: Any, *, seed: int, max_new_tokens: int | None = None
) -> Any:
    """transformers' ``generate()`` on ``input_ids`` (``[rows, T]``) with ``torch.manual_seed
    (seed)``: ``(tokens made, audio per row)``, the audio ``None`` for a row that made none."""
    import torch
    from transformers import VibeVoiceForConditionalGeneration

    model = VibeVoiceForConditionalGeneration.from_pretrained(path).eval()
    limit = {} if max_new_tokens is None else {"max_new_tokens": max_new_tokens}
    torch.manual_seed(seed)
    out = model.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        return_dict_in_generate=True,
        **limit,  # None: the checkpoint's generation config decides
    )
    audio = [None if a is None else a.reshape(-1).float() for a in out.audio]
    return out.sequences[:, input_ids.shape[1] :], audio
