"""Tiny random-weight Wan checkpoints in the real diffusers layout, for tests and demos.

The weights are random: outputs are noise-like videos, useful only to check that loading,
orchestration and numerics match diffusers. Every builder is seeded (same bytes every time) and
takes a couple of seconds on a CPU. The layout is what ``save_pretrained`` of diffusers'
``WanPipeline`` / ``WanImageToVideoPipeline`` writes (``model_index.json``, ``transformer/``,
``vae/``, ``text_encoder/``, ``tokenizer/``, ``scheduler/``, ...), safetensors only, with a T5
Unigram tokenizer trained in-process by the ``tokenizers`` library.

Variants (``build_tiny_wan(path, variant)``):

``t2v``
    Wan2.1 T2V (the 1.3B and 14B layouts are the same code): ``WanPipeline``, 16-channel VAE
    (spatial factor 8), UniPC flow scheduler, shift 3.
``t2v-a14b``
    Wan2.2 T2V-A14B: ``WanPipeline`` with ``transformer`` + ``transformer_2`` and
    ``boundary_ratio=0.875``.
``ti2v``
    Wan2.2 TI2V-5B: ``WanPipeline`` with ``expand_timesteps=True`` and the 48-channel
    residual VAE (spatial factor 16, patchified); text-to-video and text+image-to-video.
``i2v``
    Wan2.1 I2V: ``WanImageToVideoPipeline`` with a CLIP vision encoder and image processor.
``i2v-a14b``
    Wan2.2 I2V-A14B: ``WanImageToVideoPipeline`` with two experts, no CLIP encoder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

VARIANTS = ("t2v", "t2v-a14b", "ti2v", "i2v", "i2v-a14b")

_CORPUS = [
    "a cat walks on the grass in the sun",
    "a red car drives along a wet road at night",
    "two people dance in a bright room",
    "waves crash on a rocky shore at sunset",
    "an astronaut rides a horse on the moon",
    "blurry, low quality, static, watermark, text",
    "the quick brown fox jumps over the lazy dog",
    "close up of a flower opening in spring rain",
]

#: Tiny text width (the UMT5 d_model and the transformer's text_dim).
TEXT_DIM = 32


def build_tiny_wan(path: str | Path, variant: str = "t2v") -> Path:
    """Build the tiny ``variant`` checkpoint at ``path`` (created) and return the path."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    import torch
    from diffusers import (
        AutoencoderKLWan,
        UniPCMultistepScheduler,
        WanPipeline,
        WanTransformer3DModel,
    )

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer()
    text_encoder = _text_encoder(len(tokenizer))
    two_experts = variant.endswith("a14b")
    ti2v = variant == "ti2v"
    clip = variant == "i2v"
    image_dim = 32 if clip else None

    in_channels = {"ti2v": 48, "i2v": 36, "i2v-a14b": 36}.get(variant, 16)
    out_channels = 48 if ti2v else 16

    def transformer(seed: int) -> Any:
        torch.manual_seed(seed)
        return WanTransformer3DModel(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=12,
            in_channels=in_channels,
            out_channels=out_channels,
            text_dim=TEXT_DIM,
            freq_dim=32,
            ffn_dim=32,
            num_layers=2,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            image_dim=image_dim,
            added_kv_proj_dim=24 if clip else None,
            rope_max_seq_len=32,
        ).eval()

    torch.manual_seed(2)
    if ti2v:
        gen = torch.Generator().manual_seed(3)
        vae = AutoencoderKLWan(
            base_dim=8,
            decoder_base_dim=8,
            z_dim=48,
            dim_mult=[1, 1, 1, 1],
            num_res_blocks=1,
            temperal_downsample=[False, True, True],
            latents_mean=[round(float(x), 4) for x in torch.randn(48, generator=gen) * 0.5],
            latents_std=[round(float(x), 4) for x in torch.rand(48, generator=gen) + 0.5],
            is_residual=True,
            in_channels=12,
            out_channels=12,
            patch_size=2,
            scale_factor_temporal=4,
            scale_factor_spatial=16,
        ).eval()
    else:
        vae = AutoencoderKLWan(
            base_dim=8,
            z_dim=16,
            dim_mult=[1, 1, 1, 1],
            num_res_blocks=1,
            temperal_downsample=[False, True, True],
        ).eval()
    scheduler = UniPCMultistepScheduler(
        prediction_type="flow_prediction",
        use_flow_sigmas=True,
        num_train_timesteps=1000,
        flow_shift=5.0 if ti2v else 3.0,
    )
    components: dict[str, Any] = {
        "tokenizer": tokenizer,
        "text_encoder": text_encoder,
        "vae": vae,
        "scheduler": scheduler,
        "transformer": transformer(10),
        "transformer_2": transformer(11) if two_experts else None,
    }
    if variant.startswith("i2v"):
        # Imported here: diffusers' I2V module imports transformers' CLIPImageProcessor by name,
        # which warns where torchvision is missing (the text-to-video builds stay quiet).
        from diffusers import WanImageToVideoPipeline

        image_encoder, image_processor = _clip() if clip else (None, None)
        pipe = WanImageToVideoPipeline(
            **components,
            image_encoder=image_encoder,
            image_processor=image_processor,
            boundary_ratio=0.9 if two_experts else None,
        )
    else:
        pipe = WanPipeline(
            **components,
            boundary_ratio=0.875 if two_experts else None,
            expand_timesteps=ti2v,
        )
    pipe.save_pretrained(path, safe_serialization=True)
    readme = path / "README.md"
    readme.write_text(
        f"# tiny Wan ({variant})\n\nRandom weights, built by omni_wan.testing.build_tiny_wan "
        "for tests and demos. Its outputs are noise.\n"
    )
    return path


def _tokenizer() -> Any:
    from tokenizers import SentencePieceUnigramTokenizer
    from transformers import T5TokenizerFast

    unigram = SentencePieceUnigramTokenizer()
    unigram.train_from_iterator(
        _CORPUS * 4,
        vocab_size=120,
        special_tokens=["<pad>", "</s>", "<unk>"],
        unk_token="<unk>",
        show_progress=False,
    )
    from tokenizers.processors import TemplateProcessing

    unigram.post_processor = TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]
    )
    return T5TokenizerFast(
        tokenizer_object=unigram._tokenizer,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        extra_ids=0,
        model_max_length=512,
    )


def _text_encoder(vocab_size: int) -> Any:
    import torch
    from transformers import UMT5Config, UMT5EncoderModel

    torch.manual_seed(1)
    config = UMT5Config(
        vocab_size=vocab_size,
        d_model=TEXT_DIM,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
        dropout_rate=0.0,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    return UMT5EncoderModel(config).eval()


def _clip() -> tuple[Any, Any]:
    import torch
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    torch.manual_seed(4)
    config = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=3,
        num_attention_heads=4,
        image_size=32,
        patch_size=8,
        projection_dim=32,
    )
    processor = CLIPImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    )
    return CLIPVisionModel(config).eval(), processor


def model_index(path: str | Path) -> dict[str, Any]:
    """The checkpoint's ``model_index.json`` (a convenience for tests)."""
    return json.loads((Path(path) / "model_index.json").read_text())
