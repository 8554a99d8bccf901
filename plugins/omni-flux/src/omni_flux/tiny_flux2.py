"""Tiny random-weight FLUX.2 checkpoints in the official Hub layout (the builders behind
:func:`omni_flux.testing.build_tiny_flux`'s ``"flux2"`` and ``"flux2-klein"`` variants).

``flux2``
    FLUX.2-dev: ``Flux2Pipeline``: a Mistral 3 text encoder (``Mistral3ForConditionalGeneration``
    with a one-layer Pixtral vision tower) behind a ``PixtralProcessor`` whose chat template puts
    the system message in ``[SYSTEM_PROMPT]`` and the prompt in ``[INST]`` (the folder holds the
    processor's parts: see :func:`_mistral_tokenizer`); a guidance-distilled
    ``Flux2Transformer2DModel``.
``flux2-klein``
    FLUX.2-klein (base, not step-distilled): ``Flux2KleinPipeline``: a Qwen3 text encoder
    (``Qwen3ForCausalLM``) behind a ``Qwen2TokenizerFast`` whose chat template knows
    ``enable_thinking``; a transformer without guidance embedding (real CFG instead).

Both encoders are deep enough for the hidden states FLUX.2 stacks (layers 10/20/30 of Mistral,
9/18/27 of Qwen3) and 16 wide, so the transformer's text width is 48. The transformer has 1
double- and 2 single-stream blocks of 2 heads x 16, the VAE (``AutoencoderKLFlux2``) the real
8x factor, 4 latent channels and random batch-norm statistics (so the latent normalisation
shows). The tokenizers are byte-level BPEs trained in-process with ``tokenizers``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The widths of the tiny text encoders (the transformer's text width is three times this).
TEXT_DIM = 16
_CORPUS = (
    "a red cat sitting on a mat in the sun",
    "a lighthouse at dusk above a stormy sea",
    "blurry, low quality, watermark, text",
    "the quick brown fox jumps over the lazy dog",
)
#: FLUX.2's scheduler config as published (the shift comes from the pipeline's empirical mu).
SCHEDULER: dict[str, Any] = {
    "base_image_seq_len": 256,
    "base_shift": 0.5,
    "max_image_seq_len": 4096,
    "max_shift": 1.15,
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "time_shift_type": "exponential",
    "use_dynamic_shifting": True,
}
_QWEN_TEMPLATE = (
    "{%- for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)
_MISTRAL_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages %}"
    "{%- if message['content'] is string %}{%- set text = message['content'] %}"
    "{%- else %}{%- set text = message['content'] | selectattr('type', 'equalto', 'text')"
    " | map(attribute='text') | join('') %}{%- endif %}"
    "{%- if message['role'] == 'system' %}{{ '[SYSTEM_PROMPT]' + text + '[/SYSTEM_PROMPT]' }}"
    "{%- elif message['role'] == 'user' %}{{ '[INST]' + text + '[/INST]' }}"
    "{%- else %}{{ text + eos_token }}{%- endif %}"
    "{%- endfor %}"
)


def _bpe(corpus: list[str], special: list[str]) -> Any:
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on ``corpus`` (milliseconds)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus * 20, trainer)
    return tok


def _qwen_tokenizer() -> Any:
    from transformers import Qwen2TokenizerFast

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    tok = _bpe([*_CORPUS, "<|im_start|>user\n", "<|im_start|>assistant\n"], special)
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tokenizer = Qwen2TokenizerFast(
        vocab=model["vocab"],
        merges=merges,
        pad_token="<|endoftext|>",
        eos_token="<|im_end|>",
        additional_special_tokens=special[1:],
    )
    tokenizer.chat_template = _QWEN_TEMPLATE
    return tokenizer


def _mistral_tokenizer() -> Any:
    """The tokenizer of the ``PixtralProcessor`` folder, with the processor's chat template.

    The processor itself is not built: transformers 5 imports torchvision for Pixtral's image
    processor module, and a text-to-image prompt only ever goes through the tokenizer and the
    template (:mod:`omni_flux.compat` loads the folder either way)."""
    from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE
    from transformers import PreTrainedTokenizerFast

    special = ["<unk>", "<s>", "</s>", "<pad>", "[INST]", "[/INST]"]
    special += ["[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[IMG]", "[IMG_BREAK]", "[IMG_END]"]
    tok = _bpe([*_CORPUS, SYSTEM_MESSAGE], special)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    tokenizer.chat_template = _MISTRAL_TEMPLATE
    return tokenizer


def _save_processor(tokenizer: Any, folder: Path) -> None:
    """A ``PixtralProcessor`` folder: its tokenizer, image processor and processor config."""
    from transformers import PixtralImageProcessor

    tokenizer.save_pretrained(folder)
    image_processor = PixtralImageProcessor(
        size={"longest_edge": 64}, patch_size={"height": 16, "width": 16}
    )
    image_processor.save_pretrained(folder)
    config = folder / "preprocessor_config.json"
    values = json.loads(config.read_text())
    values["image_processor_type"] = "PixtralImageProcessor"  # the Hub's (PIL without torchvision)
    config.write_text(json.dumps(values, indent=2) + "\n")
    processor = {
        "processor_class": "PixtralProcessor",
        "patch_size": 16,
        "spatial_merge_size": 2,
        "image_token": "[IMG]",
        "image_break_token": "[IMG_BREAK]",
        "image_end_token": "[IMG_END]",
    }
    (folder / "processor_config.json").write_text(json.dumps(processor, indent=2) + "\n")


def _mistral(tokenizer: Any) -> Any:
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration

    config = Mistral3Config(
        text_config={
            "model_type": "mistral",
            "vocab_size": len(tokenizer),
            "hidden_size": TEXT_DIM,
            "intermediate_size": 32,
            "num_hidden_layers": 30,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 8,
            "max_position_embeddings": 2048,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "model_type": "pixtral",
            "hidden_size": TEXT_DIM,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "head_dim": 8,
            "image_size": 64,
            "patch_size": 16,
        },
        image_token_index=tokenizer.convert_tokens_to_ids("[IMG]"),
        spatial_merge_size=2,
    )
    return Mistral3ForConditionalGeneration(config).eval()


def _qwen3(tokenizer: Any) -> Any:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=TEXT_DIM,
        intermediate_size=32,
        num_hidden_layers=28,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=2048,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return Qwen3ForCausalLM(config).eval()


def _vae() -> Any:
    import torch
    from diffusers import AutoencoderKLFlux2

    vae = AutoencoderKLFlux2(
        block_out_channels=(8, 8, 8, 8),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
        sample_size=32,
    ).eval()
    with torch.no_grad():  # visible batch-norm statistics: the normalisation must be right
        vae.bn.running_mean.copy_(torch.randn(vae.bn.running_mean.shape) * 0.2)
        vae.bn.running_var.copy_(torch.rand(vae.bn.running_var.shape) + 0.5)
    return vae


def build_tiny_flux2(path: Path, variant: str) -> Path:
    """Write the tiny ``"flux2"`` or ``"flux2-klein"`` checkpoint to ``path`` (created)."""
    import diffusers
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, Flux2Transformer2DModel

    from omni_flux.testing import spread

    klein = variant == "flux2-klein"
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _qwen_tokenizer() if klein else _mistral_tokenizer()
    torch.manual_seed(0)
    text_encoder = _qwen3(tokenizer) if klein else _mistral(tokenizer)
    transformer = Flux2Transformer2DModel(
        patch_size=1,
        in_channels=16,
        num_layers=1,
        num_single_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=3 * TEXT_DIM,
        timestep_guidance_channels=32,
        axes_dims_rope=(4, 4, 4, 4),
        guidance_embeds=not klein,
    ).eval()
    vae = _vae()
    spread(transformer, vae)
    components: dict[str, Any] = {
        "text_encoder": text_encoder,
        "transformer": transformer,
        "vae": vae,
    }
    for name, component in components.items():
        component.save_pretrained(path / name, safe_serialization=True)
    FlowMatchEulerDiscreteScheduler(**SCHEDULER).save_pretrained(path / "scheduler")
    if klein:
        tokenizer.save_pretrained(path / "tokenizer")
    else:
        _save_processor(tokenizer, path / "tokenizer")
    encoder = ["transformers", "Qwen3ForCausalLM" if klein else "Mistral3ForConditionalGeneration"]
    index: dict[str, Any] = {
        "_class_name": "Flux2KleinPipeline" if klein else "Flux2Pipeline",
        "_diffusers_version": diffusers.__version__,
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": encoder,
        "tokenizer": ["transformers", "Qwen2TokenizerFast" if klein else "PixtralProcessor"],
        "transformer": ["diffusers", "Flux2Transformer2DModel"],
        "vae": ["diffusers", "AutoencoderKLFlux2"],
    }
    if klein:
        index["is_distilled"] = False
    (path / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    return path
