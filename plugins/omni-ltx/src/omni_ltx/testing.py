"""A tiny random-weight LTX-2 checkpoint in the official diffusers layout (Lightricks/LTX-2's
``model_index.json``: ``LTX2Pipeline`` with a ``Gemma3ForConditionalGeneration`` text encoder
behind a ``GemmaTokenizerFast``, ``LTX2TextConnectors``, ``LTX2VideoTransformer3DModel``,
``AutoencoderKLLTX2Video``, ``AutoencoderKLLTX2Audio``, ``LTX2Vocoder`` and a dynamically
shifted ``FlowMatchEulerDiscreteScheduler``), built with diffusers' and transformers' own
classes in seconds, for tests and demos.

The sizes are diffusers' own LTX-2 fast tests': a 2-layer Gemma 3 of width 16 (plus a 1-layer
SigLIP tower, which the conditional-generation class carries), 1-layer connectors, a 2-block
audio-video transformer, a VAE with 2x spatial and 2x temporal factors (sides in multiples of 2,
2k+1 frames), an audio VAE over 8 mel bins and a 2-stage stereo vocoder at 16 kHz. The Gemma
tokenizer is a byte-fallback BPE over the 256 byte tokens, so any text tokenizes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The width of the tiny Gemma 3 text model (the connectors' caption channels).
TEXT_DIM = 16
#: Its decoder layers (the connectors read every hidden state: layers + 1).
TEXT_LAYERS = 2
#: Lightricks/LTX-2's scheduler: dynamic shifting between these sequence lengths and shifts.
SCHEDULER: dict[str, Any] = {
    "num_train_timesteps": 1000,
    "use_dynamic_shifting": True,
    "base_image_seq_len": 1024,
    "max_image_seq_len": 4096,
    "base_shift": 0.95,
    "max_shift": 2.05,
    "shift_terminal": 0.1,
    "time_shift_type": "exponential",
}
_SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]


def build_tokenizer() -> Any:
    """A ``GemmaTokenizerFast``: the special tokens, then the 256 byte-fallback tokens."""
    from transformers import GemmaTokenizerFast

    vocab = {token: i for i, token in enumerate(_SPECIAL)}
    for byte in range(256):
        vocab[f"<0x{byte:02X}>"] = len(vocab)
    vocab["▁"] = len(vocab)
    return GemmaTokenizerFast(vocab=vocab, merges=[], model_max_length=1024)


def _spread(module: Any, std: float) -> None:
    """Widen the random init (weights ``std``, biases 0.1) so the tiny networks make frames
    and sound with visible structure: flat output would make parity meaningless."""
    import torch

    with torch.no_grad():
        for name, param in module.named_parameters():
            if param.dim() > 1:
                param.normal_(0.0, std)
            elif "bias" in name:
                param.normal_(0.0, 0.1)


def _text_encoder(tokenizer: Any) -> Any:
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3TextConfig,
        SiglipVisionConfig,
    )

    config = Gemma3Config(
        text_config=Gemma3TextConfig(
            vocab_size=len(tokenizer),
            hidden_size=TEXT_DIM,
            intermediate_size=32,
            num_hidden_layers=TEXT_LAYERS,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=8,
            max_position_embeddings=2048,
            sliding_window=64,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        ),
        vision_config=SiglipVisionConfig(
            hidden_size=8,
            intermediate_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=16,
            patch_size=8,
        ),
        mm_tokens_per_image=4,
        image_token_index=tokenizer.unk_token_id,
    )
    return Gemma3ForConditionalGeneration(config).eval()


def build_tiny_ltx2(
    path: str | Path, *, image_to_video: bool = False, perturbed_attn: bool = False, seed: int = 0
) -> Path:
    """Write the tiny text-to-video checkpoint (see the module docstring) to ``path``
    (created); returns it. ``image_to_video``: ``model_index.json`` names
    ``LTX2ImageToVideoPipeline`` instead (the components are the same). ``perturbed_attn``:
    the transformer's blocks take spatio-temporal guidance's perturbation (as LTX-2.3's do;
    LTX-2.0's do not)."""
    import diffusers
    import torch
    from diffusers import (
        AutoencoderKLLTX2Audio,
        AutoencoderKLLTX2Video,
        FlowMatchEulerDiscreteScheduler,
        LTX2VideoTransformer3DModel,
    )
    from diffusers.pipelines.ltx2 import LTX2TextConnectors
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    text_encoder = _text_encoder(tokenizer)
    transformer = LTX2VideoTransformer3DModel(
        in_channels=4,
        out_channels=4,
        num_attention_heads=2,
        attention_head_dim=8,
        cross_attention_dim=16,
        audio_in_channels=4,
        audio_out_channels=4,
        audio_num_attention_heads=2,
        audio_attention_head_dim=4,
        audio_cross_attention_dim=8,
        num_layers=2,
        caption_channels=TEXT_DIM,
        rope_double_precision=False,
        rope_type="split",
        perturbed_attn=perturbed_attn,
    ).eval()
    connectors = LTX2TextConnectors(
        caption_channels=TEXT_DIM,
        text_proj_in_factor=TEXT_LAYERS + 1,
        video_connector_num_attention_heads=2,
        video_connector_attention_head_dim=8,
        video_connector_num_layers=1,
        video_connector_num_learnable_registers=None,
        audio_connector_num_attention_heads=2,
        audio_connector_attention_head_dim=8,
        audio_connector_num_layers=1,
        audio_connector_num_learnable_registers=None,
        connector_rope_base_seq_len=32,
        rope_double_precision=False,
        rope_type="split",
    ).eval()
    vae = AutoencoderKLLTX2Video(
        latent_channels=4,
        block_out_channels=(8,),
        decoder_block_out_channels=(8,),
        layers_per_block=(1,),
        decoder_layers_per_block=(1, 1),
        spatio_temporal_scaling=(True,),
        decoder_spatio_temporal_scaling=(True,),
        decoder_inject_noise=(False, False),
        downsample_type=("spatial",),
        upsample_residual=(False,),
        upsample_factor=(1,),
        timestep_conditioning=False,
        patch_size=1,
        patch_size_t=1,
        encoder_causal=True,
        decoder_causal=False,
    ).eval()
    audio_vae = AutoencoderKLLTX2Audio(
        base_channels=4,
        output_channels=2,
        ch_mult=(1,),
        num_res_blocks=1,
        attn_resolutions=None,
        in_channels=2,
        resolution=32,
        latent_channels=2,
        norm_type="pixel",
        causality_axis="height",
        dropout=0.0,
        mid_block_add_attention=False,
        sample_rate=16000,
        mel_hop_length=160,
        is_causal=True,
        mel_bins=8,
    ).eval()
    vocoder = LTX2Vocoder(
        in_channels=2 * 8,
        hidden_channels=32,
        out_channels=2,
        upsample_kernel_sizes=[16, 10, 8],
        upsample_factors=[8, 5, 4],
        resnet_kernel_sizes=[3],
        resnet_dilations=[[1, 3, 5]],
        leaky_relu_negative_slope=0.1,
        output_sampling_rate=16000,
    ).eval()
    _spread(transformer, 0.3)
    _spread(vae, 0.2)
    _spread(vocoder, 0.2)  # its default init nearly ignores the mel spectrogram
    for name, component in (
        ("text_encoder", text_encoder),
        ("connectors", connectors),
        ("transformer", transformer),
        ("vae", vae),
        ("audio_vae", audio_vae),
        ("vocoder", vocoder),
    ):
        component.save_pretrained(path / name, safe_serialization=True)
    tokenizer.save_pretrained(path / "tokenizer")
    FlowMatchEulerDiscreteScheduler(**SCHEDULER).save_pretrained(path / "scheduler")
    index = {
        "_class_name": "LTX2ImageToVideoPipeline" if image_to_video else "LTX2Pipeline",
        "_diffusers_version": diffusers.__version__,
        "audio_vae": ["diffusers", "AutoencoderKLLTX2Audio"],
        "connectors": ["ltx2", "LTX2TextConnectors"],
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "Gemma3ForConditionalGeneration"],
        "tokenizer": ["transformers", "GemmaTokenizerFast"],
        "transformer": ["diffusers", "LTX2VideoTransformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLLTX2Video"],
        "vocoder": ["ltx2", "LTX2Vocoder"],
    }
    (path / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    return path
