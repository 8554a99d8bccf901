"""Tiny random-weight FLUX checkpoints in the official Hub layout, for tests and demos.

:func:`build_tiny_flux` writes a folder that diffusers' own ``FluxPipeline`` /
``FluxKontextPipeline`` load with ``from_pretrained``, so one checkpoint exercises omni's loading
code and the reference pipeline. Every builder is seeded: two builds of a variant hold the same
weights. The layout is the one black-forest-labs publishes (``model_index.json``,
``transformer/``, ``vae/``, ``text_encoder/`` + ``tokenizer/`` (CLIP), ``text_encoder_2/`` +
``tokenizer_2/`` (T5), ``scheduler/``), safetensors only; both tokenizers are trained in-process
with the ``tokenizers`` library (a CLIP byte-level BPE with ``</w>`` word ends, a T5 Unigram).

Variants:

``dev``
    FLUX.1-dev: ``FluxPipeline``, guidance-distilled transformer (``guidance_embeds``), the
    dynamically shifted flow-match scheduler (shift 3, ``mu`` from the image size).
``schnell``
    FLUX.1-schnell: ``FluxPipeline`` without guidance embedding, unshifted scheduler.
``kontext``
    FLUX.1-Kontext-dev: ``FluxKontextPipeline`` (the dev transformer; edits an input image).
``flux2``, ``flux2-klein``
    FLUX.2-dev (``Flux2Pipeline``, Mistral 3 encoder) and FLUX.2-klein (``Flux2KleinPipeline``,
    Qwen3 encoder): see :mod:`omni_flux.tiny_flux2`.

The transformer has 1 double-stream and 2 single-stream blocks of 2 heads x 16; the VAE has the
real 8x factor (``block_out_channels`` of 4 levels) and 4 latent channels, so sizes come in
multiples of 16 pixels as with the real model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

VARIANTS = ("dev", "schnell", "kontext", "flux2", "flux2-klein")

_CORPUS = (
    "a red cat sitting on a mat in the sun",
    "a lighthouse at dusk above a stormy sea",
    "make it blue and add a hat",
    "blurry, low quality, watermark, text",
    "a photo of an astronaut riding a horse on the moon",
    "the quick brown fox jumps over the lazy dog",
    "close up of a flower opening in the spring rain",
)
#: The tiny text widths: CLIP's hidden size (the pooled projection) and T5's d_model.
CLIP_DIM = 32
T5_DIM = 32
#: Scheduler configs as published (FLUX.1-dev / Kontext, and FLUX.1-schnell).
SCHEDULER_DEV: dict[str, Any] = {
    "base_image_seq_len": 256,
    "base_shift": 0.5,
    "max_image_seq_len": 4096,
    "max_shift": 1.15,
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "use_dynamic_shifting": True,
}
SCHEDULER_SCHNELL: dict[str, Any] = {**SCHEDULER_DEV, "shift": 1.0, "use_dynamic_shifting": False}


def build_clip_tokenizer(path: Path | None = None) -> Any:
    """A tiny CLIP tokenizer (byte-level BPE with ``</w>`` word ends), trained in milliseconds."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import CLIPTokenizer

    special = ["<|startoftext|>", "<|endoftext|>"]
    tok = Tokenizer(models.BPE(end_of_word_suffix="</w>", unk_token="<|endoftext|>"))
    tok.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()]
    )
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(
                Regex(r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""),
                behavior="removed",
                invert=True,
            ),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        end_of_word_suffix="</w>",
        show_progress=False,
    )
    tok.train_from_iterator(list(_CORPUS) * 20, trainer)
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tokenizer = CLIPTokenizer(vocab=model["vocab"], merges=merges, model_max_length=77)
    if path is not None:
        tokenizer.save_pretrained(path)
    return tokenizer


def build_t5_tokenizer(path: Path | None = None) -> Any:
    """A tiny T5 tokenizer (Unigram; ``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2, as T5's)."""
    from tokenizers import SentencePieceUnigramTokenizer
    from transformers import T5Tokenizer

    unigram = SentencePieceUnigramTokenizer()
    unigram.train_from_iterator(
        list(_CORPUS) * 4,
        vocab_size=150,
        special_tokens=["<pad>", "</s>", "<unk>"],
        unk_token="<unk>",
        show_progress=False,
    )
    vocab = [(piece, score) for piece, score in json.loads(unigram.to_str())["model"]["vocab"]]
    tokenizer = T5Tokenizer(vocab=vocab, extra_ids=0, model_max_length=512)
    if path is not None:
        tokenizer.save_pretrained(path)
    return tokenizer


def spread(*modules: Any) -> None:
    """Random init leaves most weights small; a wider spread makes images (and bugs) visible."""
    import torch

    with torch.no_grad():
        for module in modules:
            for p in module.parameters():
                if p.dim() > 1:
                    p.normal_(0.0, 0.9 / max(1.0, p[0].numel() ** 0.5))


def _clip(tokenizer: Any) -> Any:
    from transformers import CLIPTextConfig, CLIPTextModel

    config = CLIPTextConfig(
        vocab_size=len(tokenizer),
        hidden_size=CLIP_DIM,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=77,
        projection_dim=CLIP_DIM,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return CLIPTextModel(config).eval()


def _t5(tokenizer: Any) -> Any:
    from transformers import T5Config, T5EncoderModel

    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=T5_DIM,
        d_kv=16,
        d_ff=64,
        num_layers=2,
        num_heads=2,
        relative_attention_num_buckets=8,
        feed_forward_proj="gated-gelu",
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )
    return T5EncoderModel(config).eval()


def tiny_vae() -> Any:
    """FLUX's AutoencoderKL layout (4 levels: factor 8, no quant convs), 4 latent channels."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(8, 8, 8, 8),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
        sample_size=32,  # tiles of 32 px when tiling is on (the real VAE: 1024)
        scaling_factor=0.3611,
        shift_factor=0.1159,
        use_quant_conv=False,
        use_post_quant_conv=False,
    ).eval()


def build_tiny_flux(path: str | Path, variant: str = "dev", *, seed: int = 0) -> Path:
    """Write the tiny ``variant`` checkpoint (see the module docstring) to ``path``; returns it."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    path = Path(path)
    if variant.startswith("flux2"):
        from omni_flux.tiny_flux2 import build_tiny_flux2

        return build_tiny_flux2(path, variant)
    import diffusers
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel

    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_clip_tokenizer()
    tokenizer_2 = build_t5_tokenizer()
    torch.manual_seed(seed)
    text_encoder = _clip(tokenizer)
    text_encoder_2 = _t5(tokenizer_2)
    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=16,
        num_layers=1,
        num_single_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=T5_DIM,
        pooled_projection_dim=CLIP_DIM,
        guidance_embeds=variant != "schnell",
        axes_dims_rope=(4, 6, 6),
    ).eval()
    vae = tiny_vae()
    spread(transformer, vae)
    config = SCHEDULER_SCHNELL if variant == "schnell" else SCHEDULER_DEV
    scheduler = FlowMatchEulerDiscreteScheduler(**config)
    components: dict[str, Any] = {
        "scheduler": scheduler,
        "text_encoder": text_encoder,
        "text_encoder_2": text_encoder_2,
        "tokenizer": tokenizer,
        "tokenizer_2": tokenizer_2,
        "transformer": transformer,
        "vae": vae,
    }
    libraries = {
        "scheduler": ("diffusers", "FlowMatchEulerDiscreteScheduler"),
        "text_encoder": ("transformers", "CLIPTextModel"),
        "text_encoder_2": ("transformers", "T5EncoderModel"),
        "tokenizer": ("transformers", "CLIPTokenizer"),
        "tokenizer_2": ("transformers", "T5TokenizerFast"),
        "transformer": ("diffusers", "FluxTransformer2DModel"),
        "vae": ("diffusers", "AutoencoderKL"),
    }
    for name, component in components.items():
        kwargs = (
            {}
            if name in ("scheduler", "tokenizer", "tokenizer_2")
            else {"safe_serialization": True}
        )
        component.save_pretrained(path / name, **kwargs)
    index = {
        "_class_name": "FluxKontextPipeline" if variant == "kontext" else "FluxPipeline",
        "_diffusers_version": diffusers.__version__,
        **{name: list(libraries[name]) for name in sorted(libraries)},
    }
    (path / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    return path
