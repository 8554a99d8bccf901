"""A tiny random-weight Z-Image checkpoint in the official Hub layout (Tongyi-MAI/Z-Image-Turbo's
``model_index.json``: ``ZImagePipeline`` with a ``Qwen3Model`` text encoder behind a
``Qwen2Tokenizer``, ``ZImageTransformer2DModel``, FLUX's 16-channel ``AutoencoderKL`` and a
``FlowMatchEulerDiscreteScheduler`` with the Turbo's static shift 3), built with diffusers' and
transformers' own classes in seconds, for tests and demos.

The text encoder is 3 layers of width 16 (Z-Image reads the second-to-last hidden state); the
transformer has 1 noise- and 1 context-refiner block and 2 main blocks of 2 heads x 16; the VAE
keeps the real 8x factor (sides in multiples of 16). The tokenizer is a byte-level BPE trained
in-process with ``tokenizers`` and a Qwen3 chat template that knows ``enable_thinking``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The width of the tiny text encoder (the transformer's caption feature width).
TEXT_DIM = 16
#: Z-Image-Turbo's scheduler config as published: a static shift, no resolution dependence.
SCHEDULER: dict[str, Any] = {
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "use_dynamic_shifting": False,
}
_CORPUS = (
    "a red cat sitting on a mat in the sun",
    "a lighthouse at dusk above a stormy sea",
    "blurry, low quality, watermark, text",
    "the quick brown fox jumps over the lazy dog",
)
_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
_TEMPLATE = (
    "{%- for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)


def build_tokenizer() -> Any:
    """A ``Qwen2TokenizerFast`` (byte-level BPE trained on a few captions) with the template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=_SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [*_CORPUS, "<|im_start|>user\n", "<|im_start|>assistant\n"]
    tok.train_from_iterator(corpus * 20, trainer)
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tokenizer = Qwen2TokenizerFast(
        vocab=model["vocab"],
        merges=merges,
        pad_token="<|endoftext|>",
        eos_token="<|im_end|>",
        additional_special_tokens=_SPECIAL[1:],
    )
    tokenizer.chat_template = _TEMPLATE
    return tokenizer


def _spread(module: Any, std: float) -> None:
    """Widen the random init (weights ``std``, biases 0.1) so the tiny networks make images with
    visible structure: a flat grey image would make parity meaningless, a saturated one (too
    wide a VAE) would hide differences at 0 and 255."""
    import torch

    with torch.no_grad():
        for name, param in module.named_parameters():
            if param.dim() > 1:
                param.normal_(0.0, std)
            elif "bias" in name:
                param.normal_(0.0, 0.1)


def build_tiny_zimage(path: str | Path, *, seed: int = 0) -> Path:
    """Write the tiny checkpoint (see the module docstring) to ``path`` (created); returns it."""
    import diffusers
    import torch
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, ZImageTransformer2DModel
    from transformers import Qwen3Config, Qwen3Model

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    text_encoder = Qwen3Model(
        Qwen3Config(
            vocab_size=len(tokenizer),
            hidden_size=TEXT_DIM,
            intermediate_size=32,
            num_hidden_layers=3,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=8,
            max_position_embeddings=2048,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    ).eval()
    transformer = ZImageTransformer2DModel(
        in_channels=16,
        dim=32,
        n_layers=2,
        n_refiner_layers=1,
        n_heads=2,
        n_kv_heads=2,
        cap_feat_dim=TEXT_DIM,
        axes_dims=[4, 6, 6],
        axes_lens=[256, 64, 64],
    ).eval()
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(8, 8, 8, 8),
        layers_per_block=1,
        latent_channels=16,
        norm_num_groups=4,
        sample_size=32,
        scaling_factor=0.3611,
        shift_factor=0.1159,
        use_quant_conv=False,
        use_post_quant_conv=False,
    ).eval()
    _spread(transformer, 0.3)
    _spread(vae, 0.1)  # ~4% of the pixels at 0 or 255, a pixel std of ~50
    for name, component in (("text_encoder", text_encoder), ("transformer", transformer)):
        component.save_pretrained(path / name, safe_serialization=True)
    vae.save_pretrained(path / "vae", safe_serialization=True)
    tokenizer.save_pretrained(path / "tokenizer")
    FlowMatchEulerDiscreteScheduler(**SCHEDULER).save_pretrained(path / "scheduler")
    index = {
        "_class_name": "ZImagePipeline",
        "_diffusers_version": diffusers.__version__,
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "Qwen3Model"],
        "tokenizer": ["transformers", "Qwen2Tokenizer"],
        "transformer": ["diffusers", "ZImageTransformer2DModel"],
        "vae": ["diffusers", "AutoencoderKL"],
    }
    (path / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    return path
