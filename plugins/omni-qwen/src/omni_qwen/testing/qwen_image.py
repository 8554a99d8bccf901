"""Tiny random-weight Qwen-Image checkpoints in the real diffusers layout, for tests and demos.

:func:`build_tiny_qwen_image` writes a folder that diffusers' own ``QwenImagePipeline`` /
``QwenImageEditPipeline`` / ``QwenImageEditPlusPipeline`` load with ``from_pretrained``, so the
same checkpoint exercises omni's loading code and the reference pipeline. Everything is seeded:
two builds of one variant are byte-identical in their weights.

The tokenizer is a byte-level BPE trained in-process with ``tokenizers`` using Qwen2's
pre-tokenizer; it encodes the Qwen-Image system-prompt prefix to exactly 34 tokens and the
edit prefix to exactly 64, which is what the pipelines drop from the encoder output. A wrong
split would fail silently (the wrong hidden states would be kept), hence the constants below
and the test that checks them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

Variant = Literal["t2i", "edit", "edit-plus"]

#: Qwen-Image's text-to-image system prefix: the first 34 tokens of every encoded prompt.
T2I_PREFIX = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, "
    "quantity, text, spatial relationships of the objects and background:<|im_end|>\n"
    "<|im_start|>user\n"
)
T2I_PREFIX_TOKENS = 34
#: Qwen-Image-Edit's system prefix: the first 64 tokens of every encoded edit prompt.
EDIT_PREFIX = (
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, "
    "texture, objects, background), then explain how the user's text instruction should alter "
    "or modify the image. Generate a new image that meets the user's requirements while "
    "maintaining consistency with the original input where appropriate.<|im_end|>\n"
    "<|im_start|>user\n"
)
EDIT_PREFIX_TOKENS = 64

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
_CORPUS = (
    T2I_PREFIX,
    EDIT_PREFIX,
    "<|im_start|>assistant\n",
    "Picture 1: <|vision_start|><|image_pad|><|vision_end|>",
    "a red cat sitting on a mat in the sun, make it blue and add a hat. ",
)
#: Condition images reach the tiny vision tower at 28x28 .. 56x56 pixels (1 to 4 tokens).
_MIN_PIXELS = 28 * 28
_MAX_PIXELS = 56 * 56


def build_tokenizer(path: Path | None = None):
    """Train the tiny byte-level BPE tokenizer (milliseconds) and return a ``Qwen2Tokenizer``."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(_CORPUS) * 50, trainer)
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tokenizer = Qwen2Tokenizer(
        vocab=model["vocab"], merges=merges, additional_special_tokens=list(SPECIAL_TOKENS[1:])
    )
    if path is not None:
        tokenizer.save_pretrained(path)
    return tokenizer


def build_tiny_qwen_image(path: str | Path, variant: Variant = "t2i", *, seed: int = 0) -> Path:
    """Write a tiny random-weight Qwen-Image checkpoint to ``path`` and return it.

    Variants: ``"t2i"`` (``QwenImagePipeline``: scheduler, vae, text_encoder, tokenizer,
    transformer), ``"edit"`` (``QwenImageEditPipeline``, adds the Qwen2-VL ``processor``) and
    ``"edit-plus"`` (``QwenImageEditPlusPipeline``, Qwen-Image-Edit-2509's multi-image layout).
    The text encoder is a 2-layer Qwen2.5-VL with a 2-block vision tower; the transformer has 2
    blocks of 2 heads x 16; the VAE downsamples 16x (the real one 8x) to 4 latent channels, so
    sizes come in multiples of 32 pixels here (16 with the real VAE).
    """
    import diffusers
    import torch
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImageTransformer2DModel,
    )
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLImageProcessor,
    )

    if variant not in ("t2i", "edit", "edit-plus"):
        raise ValueError(f"variant must be 't2i', 'edit' or 'edit-plus', not {variant!r}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    ids = tokenizer.convert_tokens_to_ids
    torch.manual_seed(seed)
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "max_position_embeddings": 2048,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1000000.0,
                "mrope_section": [2, 3, 3],
            },
            "bos_token_id": ids("<|endoftext|>"),
            "eos_token_id": ids("<|im_end|>"),
            "pad_token_id": ids("<|endoftext|>"),
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 32,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 112,
            "fullatt_block_indexes": [1],
        },
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
    )
    text_encoder = Qwen2_5_VLForConditionalGeneration(config).eval()
    transformer = QwenImageTransformer2DModel(
        patch_size=2,
        in_channels=16,
        out_channels=4,
        num_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,
        guidance_embeds=False,
        axes_dims_rope=(4, 6, 6),
    ).eval()
    # Four downsampling stages (16x, not the real 8x): edits always encode their input at about
    # 1024x1024, and this keeps that, and the image sequence, small enough for CPU tests.
    vae = AutoencoderKLQwenImage(
        base_dim=4,
        z_dim=4,
        dim_mult=[1, 1, 2, 2, 2],
        num_res_blocks=1,
        temperal_downsample=[False, True, True, False],
        latents_mean=[0.1, -0.2, 0.3, -0.1],
        latents_std=[1.5, 2.0, 1.2, 1.8],
    ).eval()
    # Random init leaves most parameters small; a wider spread makes images (and bugs) visible.
    with torch.no_grad():
        for module in (transformer, vae):
            for p in module.parameters():
                if p.dim() > 1:
                    p.normal_(0.0, 0.3 / max(1.0, p[0].numel() ** 0.5) * 3)
    scheduler = FlowMatchEulerDiscreteScheduler(
        base_image_seq_len=256,
        base_shift=0.5,
        max_image_seq_len=8192,
        max_shift=0.9,
        num_train_timesteps=1000,
        shift=1.0,
        shift_terminal=0.02,
        stochastic_sampling=False,
        time_shift_type="exponential",
        use_dynamic_shifting=True,
    )
    components: dict[str, object] = {
        "scheduler": scheduler,
        "vae": vae,
        "text_encoder": text_encoder,
        "tokenizer": tokenizer,
        "transformer": transformer,
    }
    libraries = {
        "scheduler": ("diffusers", "FlowMatchEulerDiscreteScheduler"),
        "vae": ("diffusers", "AutoencoderKLQwenImage"),
        "text_encoder": ("transformers", "Qwen2_5_VLForConditionalGeneration"),
        "tokenizer": ("transformers", "Qwen2Tokenizer"),
        "transformer": ("diffusers", "QwenImageTransformer2DModel"),
    }
    for name, component in components.items():
        kwargs = {} if name in ("scheduler", "tokenizer") else {"safe_serialization": True}
        component.save_pretrained(path / name, **kwargs)  # type: ignore[attr-defined]
    if variant != "t2i":
        # The processor is saved part by part: transformers 5 cannot build a Qwen2VLProcessor
        # object without torchvision (see omni_qwen.compat), but its folder is just these parts.
        image_processor = Qwen2VLImageProcessor(
            size={"shortest_edge": _MIN_PIXELS, "longest_edge": _MAX_PIXELS}
        )
        image_processor.save_pretrained(path / "processor")
        tokenizer.save_pretrained(path / "processor")
        (path / "processor" / "processor_config.json").write_text(
            json.dumps({"processor_class": "Qwen2VLProcessor"}, indent=2) + "\n"
        )
        libraries["processor"] = ("transformers", "Qwen2VLProcessor")
    index = {
        "_class_name": {
            "t2i": "QwenImagePipeline",
            "edit": "QwenImageEditPipeline",
            "edit-plus": "QwenImageEditPlusPipeline",
        }[variant],
        "_diffusers_version": diffusers.__version__,
        **{name: list(libraries[name]) for name in sorted(libraries)},
    }
    (path / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    return path
