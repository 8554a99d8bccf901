"""A tiny random-weight HunyuanVideo-1.5 checkpoint in the official diffusers layout
(hunyuanvideo-community/HunyuanVideo-1.5-480p_t2v's ``model_index.json``:
``HunyuanVideo15Pipeline`` with a ``Qwen2_5_VLTextModel`` behind a ``Qwen2Tokenizer``, a ByT5
``T5EncoderModel`` behind a ``ByT5Tokenizer`` for quoted glyph text,
``HunyuanVideo15Transformer3DModel``, ``AutoencoderKLHunyuanVideo15``, a
``FlowMatchEulerDiscreteScheduler`` with the 480p shift 5 and a ``ClassifierFreeGuidance`` guider
at scale 6), built with diffusers' and transformers' own classes in seconds, for tests and demos.

The text encoders are 3 (Qwen2.5-VL, which HunyuanVideo reads 3 layers from the top) and 1
(ByT5) layers of width 16; the transformer has 1 refiner and 2 double-stream blocks of 2 heads x
16 over 4 latent channels; the VAE keeps the real 16x spatial and 4x temporal factors (sides in
multiples of 16, 4k+1 frames). The Qwen tokenizer is a byte-level BPE trained in-process with
``tokenizers`` and a Qwen2.5-VL-style chat template (system + user turns).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The width of the tiny Qwen2.5-VL text encoder (the transformer's text feature width).
TEXT_DIM = 16
#: The width of the tiny ByT5 encoder (the transformer's glyph feature width).
GLYPH_DIM = 16
#: The tiny VAE's latent channels (the real one has 32).
LATENT_CHANNELS = 4
#: HunyuanVideo-1.5-480p_t2v's scheduler: a static flow shift of 5.
SCHEDULER: dict[str, Any] = {"num_train_timesteps": 1000, "shift": 5.0}
#: Its guider: classifier-free guidance at scale 6.
GUIDANCE_SCALE = 6.0
_CORPUS = (
    "a red cat walks on the grass in the sun",
    "a lighthouse at dusk above a stormy sea",
    "blurry, low quality, watermark, text",
    "You are a helpful assistant. Describe the video by detailing the following aspects",
    'a shop sign that says "OPEN" in neon',
)
_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_TEMPLATE = (
    "{%- for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
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
    corpus = [*_CORPUS, "<|im_start|>system\n", "<|im_start|>user\n", "<|im_start|>assistant\n"]
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
    """Widen the random init (weights ``std``, biases 0.1) so the tiny networks make frames
    with visible structure: flat grey frames would make parity meaningless."""
    import torch

    with torch.no_grad():
        for name, param in module.named_parameters():
            if param.dim() > 1:
                param.normal_(0.0, std)
            elif "bias" in name:
                param.normal_(0.0, 0.1)


def build_tiny_hunyuan_video15(
    path: str | Path, *, image_to_video: bool = False, seed: int = 0
) -> Path:
    """Write the tiny text-to-video checkpoint (see the module docstring) to ``path``
    (created); returns it. ``image_to_video``: the 480p_i2v layout instead
    (``HunyuanVideo15ImageToVideoPipeline``, plus a 1-layer ``SiglipVisionModel`` and its
    ``SiglipImageProcessor``; the transformer's target size 64, so an image's size bucket is
    tiny too)."""
    import diffusers
    import torch
    from diffusers import (
        AutoencoderKLHunyuanVideo15,
        ClassifierFreeGuidance,
        FlowMatchEulerDiscreteScheduler,
        HunyuanVideo15Transformer3DModel,
    )
    from transformers import (
        ByT5Tokenizer,
        Qwen2_5_VLTextConfig,
        Qwen2_5_VLTextModel,
        T5Config,
        T5EncoderModel,
    )

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    tokenizer_2 = ByT5Tokenizer()
    torch.manual_seed(seed)
    text_encoder = Qwen2_5_VLTextModel(
        Qwen2_5_VLTextConfig(
            vocab_size=len(tokenizer),
            hidden_size=TEXT_DIM,
            intermediate_size=32,
            num_hidden_layers=3,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=2048,
            rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 2]},
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=None,
            eos_token_id=tokenizer.eos_token_id,
        )
    ).eval()
    text_encoder_2 = T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer_2),
            d_model=GLYPH_DIM,
            d_kv=8,
            d_ff=32,
            num_layers=1,
            num_heads=2,
            feed_forward_proj="gated-gelu",
            is_encoder_decoder=False,
        )
    ).eval()
    transformer = HunyuanVideo15Transformer3DModel(
        in_channels=2 * LATENT_CHANNELS + 1,
        out_channels=LATENT_CHANNELS,
        num_attention_heads=2,
        attention_head_dim=16,
        num_layers=2,
        num_refiner_layers=1,
        text_embed_dim=TEXT_DIM,
        text_embed_2_dim=GLYPH_DIM,
        image_embed_dim=8,
        rope_axes_dim=(4, 6, 6),
        target_size=64 if image_to_video else 640,
        task_type="i2v" if image_to_video else "t2v",
    ).eval()
    vae = AutoencoderKLHunyuanVideo15(
        latent_channels=LATENT_CHANNELS,
        block_out_channels=(8, 8, 8, 8, 8),
        layers_per_block=1,
        spatial_compression_ratio=16,
        temporal_compression_ratio=4,
    ).eval()
    _spread(transformer, 0.3)
    _spread(vae, 0.2)  # a pixel std of ~30, almost nothing clipped
    for name, component in (
        ("text_encoder", text_encoder),
        ("text_encoder_2", text_encoder_2),
        ("transformer", transformer),
        ("vae", vae),
    ):
        component.save_pretrained(path / name, safe_serialization=True)
    tokenizer.save_pretrained(path / "tokenizer")
    tokenizer_2.save_pretrained(path / "tokenizer_2")
    FlowMatchEulerDiscreteScheduler(**SCHEDULER).save_pretrained(path / "scheduler")
    ClassifierFreeGuidance(guidance_scale=GUIDANCE_SCALE).save_pretrained(path / "guider")
    index = {
        "_class_name": "HunyuanVideo15ImageToVideoPipeline"
        if image_to_video
        else "HunyuanVideo15Pipeline",
        "_diffusers_version": diffusers.__version__,
        "guider": ["diffusers", "ClassifierFreeGuidance"],
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "Qwen2_5_VLTextModel"],
        "text_encoder_2": ["transformers", "T5EncoderModel"],
        "tokenizer": ["transformers", "Qwen2Tokenizer"],
        "tokenizer_2": ["transformers", "ByT5Tokenizer"],
        "transformer": ["diffusers", "HunyuanVideo15Transformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLHunyuanVideo15"],
    }
    if image_to_video:
        index.update(_write_image_encoder(path))
    (path / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    return path


def _write_image_encoder(path: Path) -> dict[str, list[str]]:
    """The i2v layout's SigLIP encoder (width 8: the transformer's image feature width) and
    its processor (32x32 inputs, 16 tokens); returns their model_index entries."""
    from transformers import SiglipImageProcessor, SiglipVisionConfig, SiglipVisionModel

    encoder = SiglipVisionModel(
        SiglipVisionConfig(
            hidden_size=8,
            intermediate_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        )
    ).eval()
    encoder.save_pretrained(path / "image_encoder", safe_serialization=True)
    SiglipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(
        path / "feature_extractor"
    )
    return {
        "image_encoder": ["transformers", "SiglipVisionModel"],
        "feature_extractor": ["transformers", "SiglipImageProcessor"],
    }
